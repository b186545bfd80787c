//! Context (spec packages `contextgraph` and `summarizer`): what each session did,
//! across every door and CLI. The pipeline tells [`Context`]
//! (its `ContextSink`) of each request; the [`log`] appends typed [`event`]s to a
//! SQLite file under `GLIDER_HOME/context/` ([`store`]), never blocking a request; the
//! [`graph`] folds a session's events into episodes, files, commands, errors and
//! models; the [`record`] is the continuity record built from it, which the writer
//! keeps for live sessions ([`live`], rendered when read) so a local request can carry it
//! (only when its stored episodes are the request's own: [`own`]); the
//! [`summarizer`] compacts ended episodes into the record's narrative off the request
//! path. The dashboard and `glider context` read it all through [`Reader`]. What a
//! session spends and the limits on it (the spec's contextkit) are the engine's:
//! `glider_engine::contextkit`.

mod batch;
pub mod event;
pub mod graph;
mod keyed;
pub mod live;
pub mod log;
pub mod own;
mod packed;
mod queue;
pub mod record;
pub mod responses;
mod sink;
pub mod store;
pub mod summarizer;
pub mod tools;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use glider_config::ContextConfig;

pub use graph::SessionGraph;
pub use log::{Activity, CommitObserver, ContextLog, Counters, LogOptions};
pub use record::ContinuityRecord;
pub use responses::{ChainError, ResponseStore, StoredResponse};
pub use store::{Retention, SessionRow, StoreError};
pub use summarizer::{Summarizer, SummarizerSource};

/// How often retention runs while Glider runs (it also runs at start).
const RETENTION_EVERY: Duration = Duration::from_secs(600);
/// How long the writer idles before it renders the records its events made stale: a
/// CLI's next request after a reply usually comes later than this and finds its
/// record current, while a busy writer (under load) renders only what is read.
const IDLE_REBUILD_AFTER: Duration = Duration::from_millis(20);

/// The context directory under `home` (`GLIDER_HOME`).
pub fn dir(home: &Path) -> PathBuf {
    home.join("context")
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The running context subsystem: the log, and the run id that makes request keys
/// unique across restarts.
pub struct Context {
    log: ContextLog,
    /// `<run>-`: the start of each request key, the run being this start's time.
    key_prefix: String,
    record_max_tokens: u64,
    /// Stored Responses, in the same database (`None` for a context over a bare log).
    responses: Option<Arc<ResponseStore>>,
}

impl Context {
    /// Start it under `home` as `config` says; `None` when `context.enabled` is false
    /// (then no file is created).
    pub fn start(home: &Path, config: &ContextConfig) -> Result<Option<Arc<Context>>, StoreError> {
        if !config.enabled {
            return Ok(None);
        }
        let log = ContextLog::start(LogOptions {
            dir: dir(home),
            queue_capacity: config.queue_capacity,
            retention: retention_of(config),
            retention_every: RETENTION_EVERY,
            record_max_tokens: config.record_max_tokens,
            idle_rebuild_after: IDLE_REBUILD_AFTER,
        })?;
        let responses = ResponseStore::start(&dir(home), config.queue_capacity)?;
        let mut context = Context::with_log(log);
        context.record_max_tokens = config.record_max_tokens;
        context.responses = Some(Arc::new(responses));
        Ok(Some(Arc::new(context)))
    }

    /// A context over an already started log (no stored Responses).
    pub fn with_log(log: ContextLog) -> Context {
        Context {
            log,
            key_prefix: format!("{}-", now_ms()),
            record_max_tokens: ContextConfig::default().record_max_tokens,
            responses: None,
        }
    }

    /// A reader of this log's directory, rendering records with the same budget.
    pub fn reader(&self) -> Reader {
        let mut reader =
            Reader::new(self.log.dir().to_path_buf()).with_record_budget(self.record_max_tokens);
        reader.live = Some(self.log.records_handle());
        reader
    }

    /// The stored Responses, when this context keeps them.
    pub fn responses(&self) -> Option<&Arc<ResponseStore>> {
        self.responses.as_ref()
    }

    pub fn log(&self) -> &ContextLog {
        &self.log
    }

    /// A request's key: `<run>-<bus id>`.
    fn request_key(&self, request_id: u64) -> String {
        // Not `format!`: it was a tenth of each event's building.
        let mut id = itoa::Buffer::new();
        let id = id.format(request_id);
        let mut key = String::with_capacity(self.key_prefix.len() + id.len());
        key.push_str(&self.key_prefix);
        key.push_str(id);
        key
    }
}

/// `context.retention_days` and `context.max_store_mb` as a [`Retention`].
pub fn retention_of(config: &ContextConfig) -> Retention {
    Retention {
        max_age_ms: config.retention_days.saturating_mul(86_400_000),
        max_bytes: config.max_store_mb.saturating_mul(1024 * 1024),
    }
}

/// One session as the dashboard and CLI show it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SessionView {
    #[serde(flatten)]
    pub summary: SessionRow,
    pub graph: SessionGraph,
    pub record: RecordView,
    pub budget: BudgetView,
}

impl SessionView {
    /// `session` folded from its `events` (oldest first), its record rendered within
    /// `record_max_tokens`, with no live state; `None` when there are none.
    pub fn of_events(
        session: &str,
        events: &[store::Stored],
        record_max_tokens: u64,
    ) -> Option<SessionView> {
        let (first, last) = (events.first()?, events.last()?);
        let summary = SessionRow {
            session: session.to_owned(),
            first_ms: first.event.at_ms,
            last_ms: last.event.at_ms,
            events: events.len() as u64,
            requests: events
                .iter()
                .filter(|e| matches!(e.event.body, event::EventBody::Request(_)))
                .count() as u64,
        };
        let graph = graph::fold(session, events);
        let record = ContinuityRecord::of_graph(&graph);
        let text = record.render(record_max_tokens);
        let budget = BudgetView::of_graph(&graph, summary.requests);
        Some(SessionView {
            summary,
            budget,
            graph,
            record: RecordView {
                record,
                text,
                live: None,
            },
        })
    }
}

/// What a session spent, as its log shows it, and the running engine's own budget
/// state (contextkit's, which the turn budget and the loop guard are applied to).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct BudgetView {
    /// Requests the log holds for the session, and for its newest episode.
    pub requests: u64,
    pub episode: Option<String>,
    pub episode_requests: u64,
    /// Of the requests that ended with a backend, the share a local one answered.
    pub local_share: f64,
    /// Agent loops Glider ended (turn budget or loop guard).
    pub stops: u64,
    /// The running engine's in-memory spend (`None` when read from the file by the
    /// CLI, or when the engine does not remember the session: it starts empty at each
    /// start and keeps the 4096 most recently active sessions).
    pub live: Option<glider_vocab::SessionBudget>,
}

impl BudgetView {
    /// The spend `graph` shows (no live state), for a session whose log holds
    /// `requests` request events (each is one step of the graph).
    pub fn of_graph(graph: &SessionGraph, requests: u64) -> BudgetView {
        let steps = || graph.episodes.iter().flat_map(|e| &e.steps);
        let answered = steps().filter(|s| s.backend.is_some()).count();
        let local = steps().filter(|s| s.local == Some(true)).count();
        let newest = graph.episodes.last();
        BudgetView {
            requests,
            episode: newest.map(|e| e.family.clone()),
            episode_requests: newest.map_or(0, |e| e.steps.len() as u64),
            local_share: if answered == 0 {
                0.0
            } else {
                local as f64 / answered as f64
            },
            stops: steps().filter(|s| s.budget_stop.is_some()).count() as u64,
            live: None,
        }
    }
}

/// The continuity record as the dashboard and CLI show it: its parts, and the text a
/// local model is given.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RecordView {
    #[serde(flatten)]
    pub record: ContinuityRecord,
    pub text: String,
    /// The rendered record the running server holds for the session's next local
    /// request (`None` when none is held, or when read from the file by the CLI).
    pub live: Option<String>,
}

/// Reads the log (its own connection: the writer goes on meanwhile, WAL lets both).
#[derive(Debug, Clone)]
pub struct Reader {
    dir: PathBuf,
    record_max_tokens: u64,
    /// The running log's in-memory records, when read inside `glider serve`.
    live: Option<Arc<live::RecordCache>>,
}

impl Reader {
    /// A reader of the context directory `dir`, rendering records within the default
    /// `context.record_max_tokens`.
    pub fn new(dir: PathBuf) -> Reader {
        Reader {
            dir,
            record_max_tokens: ContextConfig::default().record_max_tokens,
            live: None,
        }
    }

    /// Render records within `tokens` (the configured `context.record_max_tokens`).
    pub fn with_record_budget(mut self, tokens: u64) -> Reader {
        self.record_max_tokens = tokens;
        self
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The sessions, most recently active first (none when there is no database yet).
    pub fn sessions(&self) -> Result<Vec<SessionRow>, StoreError> {
        match store::open_existing(&self.dir)? {
            Some(conn) => store::sessions(&conn),
            None => Ok(Vec::new()),
        }
    }

    /// One session, folded; `None` when the log holds nothing of it.
    pub fn session(&self, session: &str) -> Result<Option<SessionView>, StoreError> {
        let Some(conn) = store::open_existing(&self.dir)? else {
            return Ok(None);
        };
        let events = store::events(&conn, Some(session))?;
        let Some(mut view) = SessionView::of_events(session, &events, self.record_max_tokens)
        else {
            return Ok(None);
        };
        view.record.live = self
            .live
            .as_ref()
            .and_then(|cache| cache.get(session))
            .map(|held| held.to_string());
        Ok(Some(view))
    }

    /// The budget records are rendered within (`context.record_max_tokens`).
    pub fn record_max_tokens(&self) -> u64 {
        self.record_max_tokens
    }

    /// A session's events as stored, oldest first (`glider context export`).
    pub fn events(&self, session: &str) -> Result<Vec<store::Stored>, StoreError> {
        match store::open_existing(&self.dir)? {
            Some(conn) => store::events(&conn, Some(session)),
            None => Ok(Vec::new()),
        }
    }

    /// Delete a session's events (logged as a `forgotten` event); how many went.
    pub fn forget(&self, session: &str) -> Result<u64, StoreError> {
        match store::open_existing(&self.dir)? {
            Some(mut conn) => store::forget(&mut conn, session, now_ms()),
            None => Ok(0),
        }
    }
}
