//! The summarizer (spec package `summarizer`): adapts an inference backend to
//! compaction. The log's writer tells it which sessions it committed turns for; when an
//! episode ends (a new root turn) or a session stays quiet for
//! `context.summarizer.idle_secs`, one task — never a request — reads the session's
//! events committed since its last run (what it carries between runs:
//! [`compaction::Carried`]), renders the previous narrative, the graph's facts and the
//! new turns ([`compaction::Carried::render_input`]), asks the configured model within
//! its time and token budget, and checks the answer against the graph: accepted only
//! when it names every file edited and every error still open in its range. Either way
//! the run is a `compaction` event, and the structural record stands when it is
//! rejected. A run yields to the clients: a client's request to the same backend drops
//! it (`context.summarizer.yield_to_clients`), and it is tried again later.
//!
//! One file past 600 lines on purpose: the scheduling (what is pending, what waits on a
//! commit, when a run yields to a client) is one state machine shared by the public
//! handle and its worker; what a run asks and how its answer is judged are in
//! `compaction`.

pub mod compaction;
pub mod judge;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use glider_backend::{Backend, UpstreamRequest};
use glider_config::{BackendConfig, Config, ConfigHandle};
use glider_ngl::{Dialect, Request, Role, Turn};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use crate::event::{CompactionEvent, Event, EventBody, prefix};
use crate::log::{Activity, CommitObserver};
use crate::store::{self, StoreError};
use crate::{Context, Reader};
use compaction::{Carried, Stale, Trigger};

/// Characters per token assumed when the input is cut to `max_input_tokens`.
const CHARS_PER_TOKEN: u64 = 4;
/// Most characters of a rejected answer kept in its event.
const REJECTED_TEXT_CHARS: usize = 4096;
/// Sessions waiting for a compaction; past this the longest-quiet ones are forgotten
/// (their next turn brings them back).
const MAX_PENDING: usize = 4096;

/// Where the summarizer reads its settings and finds the backend to ask.
pub trait SummarizerSource: Send + Sync {
    /// The configuration now (`context.summarizer` and the backends).
    fn config(&self) -> Arc<Config>;
    /// The client for `config` (`glider serve` hands the engine's own, with its
    /// connection pool; a fresh one otherwise).
    fn backend(&self, config: &BackendConfig) -> Arc<Backend> {
        Backend::new(config.clone())
    }
    /// Told of each applied config change, when the source has such a signal: a
    /// disabled summarizer waits on it instead of looking at the config again every
    /// [`RECHECK_WHILE_DISABLED`] (which stays the fallback without one).
    fn reloads(&self) -> Option<watch::Receiver<Arc<Config>>> {
        None
    }
}

impl SummarizerSource for ConfigHandle {
    fn config(&self) -> Arc<Config> {
        self.snapshot()
    }

    fn reloads(&self) -> Option<watch::Receiver<Arc<Config>>> {
        Some(self.subscribe())
    }
}

/// Sessions with turns not yet compacted.
#[derive(Default)]
struct Pending {
    sessions: Mutex<HashMap<String, Waiting>>,
    wake: Notify,
    /// `context.summarizer.enabled` is false: commits are not noted (the task looks
    /// at the config again on its source's next reload).
    paused: std::sync::atomic::AtomicBool,
}

/// How often a disabled summarizer looks whether it was enabled (a hot reload) when
/// its source gives no reload signal, or gives the new config a moment after it.
const RECHECK_WHILE_DISABLED: Duration = Duration::from_secs(1);

struct Waiting {
    last_active: Instant,
    episode_ended: bool,
    /// When an ended episode of this session was last compacted: the next one waits
    /// `idle_secs` after it, so a session whose episodes end faster than that (a
    /// scripted loop) has them compacted together rather than one run each.
    compacted: Option<Instant>,
}

impl CommitObserver for Pending {
    fn committed(&self, activity: &[Activity]) {
        if self.paused.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let now = Instant::now();
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        // The task is woken only when something may be due sooner than it waits for:
        // a session it does not know, or an episode that just ended. A later
        // activity only pushes a session's idle time back, which the task sees when
        // its wait ends; waking it on every commit cost a thread wake-up per event.
        let mut sooner = false;
        for seen in activity {
            if sessions.len() >= MAX_PENDING && !sessions.contains_key(&seen.session) {
                forget_quietest(&mut sessions);
            }
            let waiting = sessions.entry(seen.session.clone()).or_insert_with(|| {
                sooner = true;
                Waiting {
                    last_active: now,
                    episode_ended: false,
                    compacted: None,
                }
            });
            waiting.last_active = now;
            sooner |= seen.episode_ended && !waiting.episode_ended;
            waiting.episode_ended |= seen.episode_ended;
        }
        drop(sessions);
        if sooner {
            self.wake.notify_one();
        }
    }
}

fn forget_quietest(sessions: &mut HashMap<String, Waiting>) {
    if let Some(quietest) = sessions
        .iter()
        .min_by_key(|(_, w)| w.last_active)
        .map(|(s, _)| s.clone())
    {
        sessions.remove(&quietest);
    }
}

/// What the task does next.
enum Next {
    Compact(String, Trigger),
    WaitUntil(Instant),
    Wait,
}

impl Pending {
    /// The session due first and for what (an ended episode, or idle), or when the
    /// first one will be. An ended episode is due at once unless the session had one
    /// compacted less than `idle` ago; then at `idle` after that run, or at idle if
    /// that comes first (the idle run covers it).
    fn next(&self, idle: Duration) -> Next {
        let now = Instant::now();
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let mut soonest: Option<(&String, Instant, Trigger)> = None;
        for (session, waiting) in sessions.iter() {
            let idle_at = waiting.last_active + idle;
            let episode_at = waiting.compacted.map_or(now, |at| at + idle);
            let (due, trigger) = if waiting.episode_ended && episode_at < idle_at {
                (episode_at, Trigger::Episode)
            } else {
                (idle_at, Trigger::Idle)
            };
            if soonest.is_none_or(|(_, first, _)| due < first) {
                soonest = Some((session, due, trigger));
            }
        }
        let Some((session, due, trigger)) = soonest else {
            return Next::Wait;
        };
        if due > now {
            return Next::WaitUntil(due);
        }
        let session = session.clone();
        match trigger {
            Trigger::Episode => {
                if let Some(waiting) = sessions.get_mut(&session) {
                    waiting.episode_ended = false;
                    waiting.compacted = Some(now);
                }
            }
            Trigger::Idle => {
                sessions.remove(&session);
            }
        }
        Next::Compact(session, trigger)
    }

    /// A run of `session` for `trigger` yielded to a client before it ended: due again
    /// `idle` from now (an ended episode keeps the `compacted` time [`Pending::next`]
    /// gave it, so it waits as long); a session active since keeps its newer state.
    fn yielded(&self, session: &str, trigger: Trigger) {
        let now = Instant::now();
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let waiting = sessions.entry(session.to_owned()).or_insert(Waiting {
            last_active: now,
            episode_ended: false,
            compacted: None,
        });
        if matches!(trigger, Trigger::Episode) {
            waiting.episode_ended = true;
            waiting.compacted.get_or_insert(now);
        }
    }

    fn clear(&self) {
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

/// The running summarizer; dropping it stops its task.
pub struct Summarizer {
    task: JoinHandle<()>,
}

impl Drop for Summarizer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Summarizer {
    /// Watch `context`'s log and compact its sessions on the current Tokio runtime.
    /// The task holds the context weakly: it ends when the context is dropped.
    pub fn start(
        context: &Arc<Context>,
        source: Arc<dyn SummarizerSource>,
    ) -> Result<Summarizer, StoreError> {
        let pending = Arc::new(Pending::default());
        context.log().observe(pending.clone())?;
        let worker = Worker {
            context: Arc::downgrade(context),
            reader: Reader::new(context.log().dir().to_path_buf()),
            reloads: source.reloads(),
            source,
            pending,
            warned: None,
            carried: CarriedSessions::default(),
            resting_until: None,
        };
        Ok(Summarizer {
            task: glider_sys::safego::spawn_once("summarizer", worker.run()),
        })
    }
}

struct Worker {
    context: Weak<Context>,
    reader: Reader,
    source: Arc<dyn SummarizerSource>,
    /// The source's reload signal ([`SummarizerSource::reloads`]).
    reloads: Option<watch::Receiver<Arc<Config>>>,
    pending: Arc<Pending>,
    /// The last "cannot summarize" warning, so a standing problem is logged once.
    warned: Option<String>,
    carried: CarriedSessions,
    /// No run starts before this (`context.summarizer.max_busy_share`).
    resting_until: Option<Instant>,
}

impl Worker {
    async fn run(mut self) {
        loop {
            let config = self.source.config();
            let settings = &config.context.summarizer;
            if !settings.enabled {
                // Only activity after it is enabled again counts.
                self.pending
                    .paused
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                self.pending.clear();
                self.until_reloaded().await;
                continue;
            }
            self.pending
                .paused
                .store(false, std::sync::atomic::Ordering::Relaxed);
            if let Some(until) = self.resting_until.take()
                && until > Instant::now()
            {
                // The backend's time is the clients' first: summaries take at most
                // their share of it. What comes meanwhile waits in `pending`.
                tokio::time::sleep_until(until.into()).await;
                continue;
            }
            match self.pending.next(Duration::from_secs(settings.idle_secs)) {
                Next::Compact(session, trigger) => {
                    if self.context.strong_count() == 0 {
                        return;
                    }
                    self.compact(&config, &session, trigger).await;
                }
                Next::WaitUntil(due) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(due.into()) => {}
                        _ = self.pending.wake.notified() => {}
                    }
                }
                Next::Wait => self.pending.wake.notified().await,
            }
        }
    }

    /// Wait, disabled, for the config to change: until the source's next reload, or
    /// [`RECHECK_WHILE_DISABLED`] without a signal. A reload that enabled the
    /// summarizer before the source gives it (`glider serve`'s engine rebuilds its
    /// runtime on the same signal) is looked at again after the fallback wait.
    async fn until_reloaded(&mut self) {
        if let Some(reloads) = &mut self.reloads {
            let enabled = reloads.borrow().context.summarizer.enabled;
            if !enabled {
                if reloads.changed().await.is_ok() {
                    return;
                }
                // The config's sender is gone: no reload comes any more.
                self.reloads = None;
            }
        }
        tokio::time::sleep(RECHECK_WHILE_DISABLED).await;
    }

    /// After a run that began at `started`, rest so that runs take at most `share` of
    /// the backend's time.
    fn rest_after(&mut self, started: Instant, share: f64) {
        let took = started.elapsed();
        self.resting_until = Some(Instant::now() + resting_time(took, share));
    }

    async fn compact(&mut self, config: &Config, session: &str, trigger: Trigger) {
        let (backend_config, model) = match config.summarizer_target() {
            Ok(target) => target,
            Err(why) => {
                if self.warned.as_deref() != Some(why.as_str()) {
                    tracing::warn!("summarizer: {why}; sessions are not compacted");
                    self.warned = Some(why);
                }
                return;
            }
        };
        self.warned = None;
        let settings = &config.context.summarizer;
        let reader = self.reader.clone();
        let owned = session.to_owned();
        let max_chars = settings.max_input_tokens.saturating_mul(CHARS_PER_TOKEN) as usize;
        let carried = self.carried.take(session);
        // Reading the session and folding it (only what came since the last run, or
        // all of it the first time): off the runtime's threads, which serve requests,
        // on a thread of its own at the log writer's lower priority, so that a long
        // catch-up (a busy session's events since the last run) waits for idle moments
        // of a core the requests need.
        let prepare = move || prepare(&reader, &owned, trigger, max_chars, carried);
        let (prepared, mut carried) = match run_lowered(prepare).await {
            Ok(Ok(prepared)) => prepared,
            Ok(Err(error)) => {
                tracing::warn!(%error, session, "summarizer cannot read the session");
                return;
            }
            Err(error) => {
                tracing::warn!(%error, "summarizer read task failed");
                return;
            }
        };
        let Some((input, required, range)) = prepared else {
            self.carried.put(carried);
            return;
        };
        let previous = carried
            .as_ref()
            .and_then(Carried::previous_narrative)
            .map(str::to_owned);
        let backend = self.source.backend(backend_config);
        let started = Instant::now();
        let mark = backend.foreground.mark();
        let asking = tokio::time::timeout(
            Duration::from_secs(settings.timeout_secs),
            ask(&backend, &model, &input, settings.max_tokens),
        );
        let yielding = async {
            if settings.yield_to_clients {
                backend.foreground.next_after(mark).await
            } else {
                std::future::pending().await
            }
        };
        let answer = tokio::select! {
            answer = asking => answer.unwrap_or_else(|_| {
                Err(format!(
                    "no summary within {} s (context.summarizer.timeout_secs)",
                    settings.timeout_secs
                ))
            }),
            () = yielding => {
                self.rest_after(started, settings.max_busy_share);
                // Dropping the request closes its connection: the server stops the
                // summary and its slot is the client's.
                self.pending.yielded(session, trigger);
                self.carried.put(carried);
                if let Some(context) = self.context.upgrade() {
                    context
                        .log()
                        .counters()
                        .compactions_yielded
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                tracing::debug!(session, backend = backend.name(), "summary yielded to a client request");
                return;
            }
        };
        self.rest_after(started, settings.max_busy_share);
        let mut event = CompactionEvent {
            source: "summarizer".into(),
            until_ms: range.until_ms,
            until_event: range.until_event,
            since_ms: range.since_ms,
            trigger: trigger.as_str().to_owned(),
            backend: Some(backend.name().to_owned()),
            model: Some(model),
            took_ms: started.elapsed().as_millis() as u64,
            ..CompactionEvent::default()
        };
        match answer {
            Ok(summary) => {
                event.input_tokens = summary.input_tokens;
                event.output_tokens = summary.output_tokens;
                let missing = required.missing(&summary.text);
                let no_summary = judge::rejection(&summary.text, &input, previous.as_deref());
                if summary.text.trim().is_empty() {
                    event.reason = Some("the model wrote no summary".into());
                } else if let Some(why) = no_summary {
                    event.reason = Some(why);
                    event.rejected_text =
                        Some(prefix(&summary.text, REJECTED_TEXT_CHARS).to_owned());
                } else if missing.is_empty() {
                    event.accepted = true;
                    event.narrative = summary.text.trim().to_owned();
                } else {
                    event.reason = Some(format!(
                        "the summary leaves out {} of the files edited and errors open",
                        missing.len()
                    ));
                    event.missing = missing;
                    event.rejected_text =
                        Some(prefix(&summary.text, REJECTED_TEXT_CHARS).to_owned());
                }
            }
            Err(why) => event.reason = Some(why),
        }
        if let Some(carried) = &mut carried {
            carried.accepted(&event);
        }
        self.carried.put(carried);
        let Some(context) = self.context.upgrade() else {
            return;
        };
        let counters = context.log().counters();
        if event.accepted {
            counters
                .compactions_accepted
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::info!(
                session,
                trigger = trigger.as_str(),
                backend = event.backend.as_deref(),
                took_ms = event.took_ms,
                "session compacted"
            );
        } else {
            counters
                .compactions_rejected
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::warn!(
                session,
                trigger = trigger.as_str(),
                backend = event.backend.as_deref(),
                reason = event.reason.as_deref(),
                missing = ?event.missing,
                "compaction rejected; the structural record stands"
            );
        }
        context.log().append(Event {
            at_ms: crate::now_ms(),
            session: Some(session.to_owned()),
            body: EventBody::Compaction(event),
        });
    }
}

/// How long to rest after a run that took `took`, so that runs take at most `share`
/// of the time (`context.summarizer.max_busy_share`).
fn resting_time(took: Duration, share: f64) -> Duration {
    let share = share.clamp(f64::MIN_POSITIVE, 1.0);
    took.mul_f64((1.0 - share) / share)
}

/// Advance `carried` over its session's events after [`Carried::through`] for
/// `trigger`: the range it then covers and whether any reply among those events
/// succeeded. Read a page at a time, a look ahead and then the fold, so that a
/// catch-up over a busy session holds one page of its events, never all of them; what
/// came since the last run usually fits one page, which is kept from the look ahead
/// and folded without reading it again.
fn read_since(
    conn: &rusqlite::Connection,
    carried: &mut Carried,
    trigger: Trigger,
    max_chars: usize,
) -> Result<Result<(Option<compaction::Range>, bool), Stale>, StoreError> {
    let session = carried.session().to_owned();
    let after = carried.through();
    let mut ahead = compaction::Ahead::default();
    // The first page while it is the only one.
    let mut only_page: Option<Vec<store::Stored>> = None;
    let mut pages = 0;
    store::each_page_after(conn, Some(&session), after, store::PAGE_EVENTS, |page| {
        carried.look_ahead(&mut ahead, page);
        pages += 1;
        only_page = (pages == 1).then(|| page.to_vec());
        std::ops::ControlFlow::Continue(())
    })?;
    if let Err(stale) = carried.begin(&ahead) {
        return Ok(Err(stale));
    }
    match only_page {
        Some(page) => {
            let _ = carried.fold_page(&page, trigger, &ahead, max_chars);
        }
        None => store::each_page_after(conn, Some(&session), after, store::PAGE_EVENTS, |page| {
            carried.fold_page(page, trigger, &ahead, max_chars)
        })?,
    }
    Ok(Ok((carried.range(trigger), ahead.answered)))
}

/// A compaction's input, what its answer must name and the range it covers.
type Prepared = (String, compaction::Required, compaction::Range);

/// How much lower than the process's a run's reading thread's priority is (nice
/// levels; the lowest there is). Lower than the log writer's
/// ([`crate::log::WRITER_NICE`]), which must keep up with the requests or drop events: a
/// catch-up can wait. Linux weighs a nice-0 thread 1,024, a nice-10 one 110 and a
/// nice-19 one 15: beside one busy runtime thread (a runtime on one core has one), a
/// catch-up landing in a saturated spell took about a tenth of the core at 10, and
/// takes about a seventieth at 19 — and all of an idle core.
const READ_NICE: i32 = 19;

/// `work` on a new thread whose priority is lowered to [`READ_NICE`]; its result, or
/// why it could not run.
async fn run_lowered<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, std::io::Error> {
    let (done, result) = tokio::sync::oneshot::channel();
    glider_sys::threadprio::spawn_lowered("glider-summarizer-read", READ_NICE, move || {
        let _ = done.send(work());
    })?;
    result
        .await
        .map_err(|_| std::io::Error::other("the summarizer's read thread ended without a result"))
}

/// `session`'s range for `trigger`, the summarizer's input for it (at most
/// `max_chars`) and what the summary must name (`None` when there is nothing to
/// compact), with what to carry to the next run. `carried` is what the last run left:
/// only the events after it are read, unless events of the session were deleted
/// since (then, or without it, the whole session is).
fn prepare(
    reader: &Reader,
    session: &str,
    trigger: Trigger,
    max_chars: usize,
    carried: Option<Carried>,
) -> Result<(Option<Prepared>, Option<Carried>), StoreError> {
    let Some(conn) = store::open_existing(reader.dir())? else {
        return Ok((None, None));
    };
    let Some(first_id) = store::first_id(&conn, session)? else {
        return Ok((None, None));
    };
    let mut carried = carried
        .filter(|c| c.first_id() == first_id)
        .unwrap_or_else(|| Carried::new(session, first_id));
    let (range, answered) = match read_since(&conn, &mut carried, trigger, max_chars)? {
        Ok(read) => read,
        Err(Stale) => {
            carried = Carried::new(session, first_id);
            // A fresh carrier has folded nothing another compaction could cut.
            read_since(&conn, &mut carried, trigger, max_chars)?.unwrap_or((None, false))
        }
    };
    if range.is_some() && !answered {
        // Every turn failed: nothing was done that a summary could tell, and a model
        // asked anyway writes about its instructions.
        tracing::info!(
            session,
            "summarizer: no turn of the range was answered; nothing to summarize"
        );
        return Ok((None, Some(carried)));
    }
    let prepared = range.map(|range| {
        let required = carried.required();
        let input = carried.render_input(&required, max_chars);
        (input, required, range)
    });
    Ok((prepared, Some(carried)))
}

/// What the summarizer carries of the sessions it compacted lately ([`Carried`]), so
/// that a run reads only what came since the last; past [`MAX_CARRIED`] the one
/// compacted longest ago is let go (read whole again on its next run).
#[derive(Default)]
struct CarriedSessions {
    sessions: HashMap<String, (Carried, Instant)>,
}

/// Sessions whose fold the summarizer keeps between runs.
const MAX_CARRIED: usize = 64;

impl CarriedSessions {
    fn take(&mut self, session: &str) -> Option<Carried> {
        self.sessions.remove(session).map(|(carried, _)| carried)
    }

    fn put(&mut self, carried: Option<Carried>) {
        let Some(carried) = carried else {
            return;
        };
        if self.sessions.len() >= MAX_CARRIED
            && let Some(oldest) = self
                .sessions
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(session, _)| session.clone())
        {
            self.sessions.remove(&oldest);
        }
        self.sessions
            .insert(carried.session().to_owned(), (carried, Instant::now()));
    }
}

/// What the model answered.
struct Summary {
    text: String,
    input_tokens: u64,
    output_tokens: u64,
}

/// One non-streamed request to `backend` in its own dialect; the error says what
/// failed.
async fn ask(
    backend: &Backend,
    model: &str,
    input: &str,
    max_tokens: u32,
) -> Result<Summary, String> {
    let request = Request {
        model: model.to_owned(),
        turns: vec![
            Turn::text(Role::System, compaction::SYSTEM_PROMPT),
            Turn::text(Role::User, input),
        ],
        max_tokens: Some(max_tokens),
        temperature: Some(0.2),
        stream: false,
        ..Request::default()
    };
    let dialect = backend.dialect_for(Dialect::OpenAiChat);
    let codec = glider_dialects::codec(dialect);
    let upstream = UpstreamRequest {
        dialect,
        body: Bytes::from(glider_dialects::json_bytes(&codec.encode_request(&request))),
        stream: false,
        headers: http::HeaderMap::new(),
    };
    let failed = |what: String| format!("backend {} failed: {what}", backend.name());
    let reply = backend
        .send_background(&upstream)
        .await
        .map_err(|f| failed(f.to_string()))?;
    let body = reply.collect().await.map_err(|f| failed(f.to_string()))?;
    let response = codec
        .decode_response(&body)
        .map_err(|e| failed(format!("its reply does not decode: {}", e.message)))?;
    Ok(Summary {
        text: response.plain_text(),
        input_tokens: response.usage.input_tokens,
        output_tokens: response.usage.output_tokens,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_runs_reading_is_done_at_the_lowest_priority() {
        use glider_sys::threadprio::this_thread_nice;
        let ours = this_thread_nice().expect("nice");
        let theirs = run_lowered(this_thread_nice)
            .await
            .expect("ran")
            .expect("nice");
        if cfg!(target_os = "linux") {
            assert_eq!(theirs, (ours + READ_NICE).min(19));
        }
        assert_eq!(this_thread_nice().expect("nice"), ours, "ours is unchanged");
    }

    #[test]
    fn summaries_take_at_most_their_share_of_the_backend_s_time() {
        let took = Duration::from_secs(20);
        assert_eq!(resting_time(took, 0.1), Duration::from_secs(180));
        assert_eq!(resting_time(took, 0.5), Duration::from_secs(20));
        assert_eq!(resting_time(took, 1.0), Duration::ZERO);
    }

    #[test]
    fn a_range_whose_every_turn_failed_is_not_summarized() {
        use crate::event::ReplyEvent;
        let reply = |status| store::Stored {
            id: 1,
            family: None,
            event: Event {
                at_ms: 1,
                session: Some("s".into()),
                body: EventBody::Reply(ReplyEvent {
                    status: Some(status),
                    ..ReplyEvent::default()
                }),
            },
        };
        let answered = |events: &[store::Stored]| {
            let carried = Carried::new("s", 1);
            let mut ahead = compaction::Ahead::default();
            carried.look_ahead(&mut ahead, events);
            ahead.answered
        };
        assert!(!answered(&[reply(502), reply(401)]));
        assert!(answered(&[reply(502), reply(200)]));
    }

    fn ended(session: &str) -> Activity {
        Activity {
            session: session.into(),
            episode_ended: true,
        }
    }

    /// A root turn of "s" that edits `path`, and the result of the edit.
    fn edit_turn(user: &str, path: &str, call: &str) -> Vec<(Option<String>, Event)> {
        use crate::event::{ReplyEvent, RequestEvent, ToolCall, ToolResult};
        let edit = ToolCall::new(
            call.into(),
            "Write".into(),
            serde_json::json!({"file_path": path, "content": "x"}),
        );
        let bodies = [
            EventBody::Request(RequestEvent {
                request: format!("{call}-1"),
                root: true,
                user_text: Some(user.into()),
                ..RequestEvent::default()
            }),
            EventBody::Reply(ReplyEvent {
                request: format!("{call}-1"),
                tool_calls: vec![edit],
                ..ReplyEvent::default()
            }),
            EventBody::Request(RequestEvent {
                request: format!("{call}-2"),
                tool_results: vec![ToolResult::new(call.into(), None, false, "ok")],
                ..RequestEvent::default()
            }),
        ];
        bodies
            .into_iter()
            .map(|body| {
                let event = Event {
                    at_ms: 1,
                    session: Some("s".into()),
                    body,
                };
                (Some(call.to_owned()), event)
            })
            .collect()
    }

    #[test]
    fn a_run_reads_what_came_since_and_a_forgotten_session_is_read_again() {
        let home = tempfile::tempdir().expect("tempdir");
        let reader = Reader::new(home.path().to_path_buf());
        let mut conn = store::open(home.path()).expect("opens");
        store::append(
            &mut conn,
            &edit_turn("write the parser", "/w/parse.rs", "a"),
        )
        .expect("append");
        let run = |carried| prepare(&reader, "s", Trigger::Idle, 100_000, carried).expect("reads");
        let (prepared, carried) = run(None);
        let (input, required, range) = prepared.expect("a range");
        assert!(input.contains("[user] write the parser"), "{input}");
        assert_eq!(required.files.len(), 1);
        let mut carried = carried.expect("carried");
        assert_eq!(carried.through(), range.until_event);
        carried.accepted(&CompactionEvent {
            accepted: true,
            narrative: "The parser is written in parse.rs.".into(),
            until_event: range.until_event,
            ..CompactionEvent::default()
        });
        // The next run reads only the new turn, and builds on the narrative.
        store::append(&mut conn, &edit_turn("now the lexer", "/w/lex.rs", "b")).expect("append");
        let (prepared, carried) = run(Some(carried));
        let (input, _, _) = prepared.expect("a range");
        assert!(
            input.contains("The parser is written in parse.rs."),
            "{input}"
        );
        assert!(input.contains("[user] now the lexer"), "{input}");
        assert!(!input.contains("[user] write the parser"), "{input}");
        // Forgotten, then used again under the same key: nothing of before is carried.
        store::forget(&mut conn, "s", 2).expect("forgets");
        store::append(&mut conn, &edit_turn("the readme", "/w/README.md", "c")).expect("append");
        let (prepared, carried) = run(carried);
        let (input, required, _) = prepared.expect("a range");
        for gone in ["parse.rs", "lex.rs", "the lexer", "The parser is written"] {
            assert!(!input.contains(gone), "{gone} was forgotten: {input}");
        }
        assert!(
            input.contains("this is the session's first compaction"),
            "{input}"
        );
        assert_eq!(required.files.len(), 1);
        assert!(carried.is_some());
    }

    #[test]
    fn a_run_over_several_pages_reads_as_one_read_of_the_whole() {
        let home = tempfile::tempdir().expect("tempdir");
        let reader = Reader::new(home.path().to_path_buf());
        let mut conn = store::open(home.path()).expect("opens");
        // Over two pages of events: the look ahead and the fold read three.
        let (mut turn, mut stored) = (0, 0);
        while stored <= 2 * store::PAGE_EVENTS {
            turn += 1;
            let events = edit_turn(
                &format!("edit number {turn}"),
                &format!("/w/file{turn}.rs"),
                &format!("call{turn}"),
            );
            stored += events.len();
            store::append(&mut conn, &events).expect("append");
        }
        let (prepared, _) = prepare(&reader, "s", Trigger::Idle, 100_000, None).expect("reads");
        let (input, required, range) = prepared.expect("a range");
        let mut whole = Carried::new("s", 1);
        let events = store::events(&conn, Some("s")).expect("reads");
        let whole_range = whole
            .advance(&events, Trigger::Idle, 100_000)
            .expect("not stale")
            .expect("a range");
        assert_eq!(range, whole_range);
        assert_eq!(required, whole.required());
        assert_eq!(input, whole.render_input(&whole.required(), 100_000));
        assert!(
            input.contains(&format!("[user] edit number {turn}")),
            "{input}"
        );
    }

    #[test]
    fn an_ended_episode_is_due_at_once_and_the_next_one_after_idle_secs() {
        let pending = Pending::default();
        let idle = Duration::from_secs(60);
        assert!(matches!(pending.next(idle), Next::Wait));
        pending.committed(&[ended("a")]);
        assert!(matches!(pending.next(idle), Next::Compact(s, Trigger::Episode) if s == "a"));
        // Another episode ends at once: it waits, and the wait is about idle_secs.
        pending.committed(&[ended("a")]);
        match pending.next(idle) {
            Next::WaitUntil(due) => {
                let wait = due.saturating_duration_since(Instant::now());
                assert!(wait > Duration::from_secs(50), "{wait:?}");
            }
            _ => panic!("the second episode waits"),
        }
        // With no wait, the ended episode is due, then each quiet session is compacted
        // at idle and forgotten.
        let quick = Duration::ZERO;
        pending.committed(&[Activity {
            session: "b".into(),
            episode_ended: false,
        }]);
        let mut idle_runs = Vec::new();
        while let Next::Compact(session, trigger) = pending.next(quick) {
            idle_runs.push((session, trigger));
        }
        idle_runs.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(
            idle_runs,
            [
                ("a".to_owned(), Trigger::Episode),
                ("a".to_owned(), Trigger::Idle),
                ("b".to_owned(), Trigger::Idle)
            ]
        );
        assert!(matches!(pending.next(quick), Next::Wait));
    }
}
