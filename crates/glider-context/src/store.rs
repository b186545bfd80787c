//! The SQLite file under `GLIDER_HOME/context/` (0700 directory, 0600 files, WAL
//! mode): opening it, its numbered migrations (`PRAGMA user_version`), appending
//! events, reading them back, and the only deletions there are — retention by age and
//! size, and forgetting a session — each logged as an event. A writer's batch is
//! written as one row per session (up to [`MAX_ROW_EVENTS`] events in it), so the
//! insert, its index entry and the statement are paid once per batch, not per event;
//! an event keeps an id of its own (schema 4). A row's events are packed
//! ([`crate::packed`], schema 6) and, past [`COMPRESS_OVER`], LZ4-compressed (schema
//! 5): at saturation a batch's rows are KBs, and the bytes, not the statements, are
//! what SQLite's WAL writes, checksums and checkpoints cost. Rows of JSON written
//! before schema 6 are read as they were.
//!
//! One file past 600 lines on purpose: it is the one owner of the SQLite schema — every
//! statement, the migrations, the row encodings and the retention sweep read and write
//! the same tables, and a change to one must be checked against all of them in one
//! place.

use std::borrow::Borrow;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

use crate::event::{Event, EventBody};
use crate::packed;

/// The database file's name inside the context directory.
pub const DB_FILE: &str = "context.sqlite3";

/// Each migration, applied in order to a database whose `user_version` is below its
/// number (its index + 1). Never edit one that shipped: add the next.
const MIGRATIONS: &[&str] = &[
    // 1: the append-only log.
    "CREATE TABLE events (
        id      INTEGER PRIMARY KEY,
        at_ms   INTEGER NOT NULL,
        session TEXT,
        family  TEXT,
        kind    TEXT NOT NULL,
        body    TEXT NOT NULL
    );
    CREATE INDEX events_by_session ON events(session, id);
    CREATE INDEX events_by_time ON events(at_ms);",
    // 2: stored Responses (`previous_response_id`, `GET /v1/responses/{id}`).
    "CREATE TABLE responses (
        id       TEXT PRIMARY KEY,
        at_ms    INTEGER NOT NULL,
        previous TEXT,
        input    TEXT NOT NULL,
        response TEXT NOT NULL
    );
    CREATE INDEX responses_by_time ON responses(at_ms);",
    // 3: events are found by age in id order (appended oldest first), so the time index
    // is gone: it cost every insert a second B-tree write and every commit a WAL page.
    "DROP INDEX IF EXISTS events_by_time;",
    // 4: a row may hold several events of one session (`kind = 'events'`, `body` a JSON
    // array of `{at_ms, family, body}`): its `count` events take the ids up to the
    // row's own, which is its last event's; `at_ms` is its newest event's time and
    // `first_ms` its oldest's; `requests` counts its requests. A row of one event is
    // written as before.
    "ALTER TABLE events ADD COLUMN count INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE events ADD COLUMN requests INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE events ADD COLUMN first_ms INTEGER;
    UPDATE events SET requests = 1 WHERE kind = 'request';",
    // 5: a row's `body` may be a BLOB: its JSON compressed (an LZ4 block after the JSON's
    // length, 4 bytes little-endian). Nothing to convert; the version tells an older
    // Glider, which reads only text, that it cannot read this file.
    "-- schema 5: compressed bodies",
    // 6: rows are written packed (`kind = 'packed'`, `body` a BLOB: see `packed.rs`
    // and `RowBuffers::stored_body`). Rows of JSON are read as before; the version
    // tells an older Glider that it cannot read this file.
    "-- schema 6: packed rows",
];

/// A row's packed events longer than this are stored compressed; shorter ones (a quiet
/// session's commit of one or two events) as they are.
pub const COMPRESS_OVER: usize = 4 * 1024;

/// Most bytes a compressed body may say it holds: far above what [`MAX_ROW_EVENTS`]
/// capped events make, so a damaged length is an error, not an allocation.
const MAX_DECOMPRESSED: usize = 256 * 1024 * 1024;

/// Most events one row holds: what a retention by size or a failed read takes at once
/// stays small, and so does a row (a few tens of KB).
pub const MAX_ROW_EVENTS: usize = 64;

/// The `kind` of a row of several events as JSON (schemas 4 and 5).
const ROW_OF_EVENTS: &str = "events";

/// The `kind` of a row of packed events ([`packed`]; schema 6): what the writer
/// appends. (The store's own logs of a deletion, `retention` and `forgotten`, are one
/// event's JSON as before.)
const PACKED: &str = "packed";

/// An event in a row of several as JSON (schemas 4 and 5).
#[derive(serde::Deserialize)]
struct ReadRowEvent {
    at_ms: u64,
    #[serde(default)]
    family: Option<String>,
    body: EventBody,
}

/// Why the store could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("context database: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("context directory {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "context database {path} has schema version {found}, newer than this Glider knows ({known}); upgrade Glider"
    )]
    TooNew {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error("event {id} in the context database does not parse: {source}")]
    BadEvent { id: i64, source: serde_json::Error },
    #[error("the row from event {id} in the context database does not read: {reason}")]
    BadRow { id: i64, reason: String },
    #[error("event {id} in the context database does not decompress: {reason}")]
    BadCompression { id: i64, reason: String },
}

/// An event as stored, with its id and turn family.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Stored {
    pub id: i64,
    /// The request key (`<run>-<bus id>`) of the root request of this event's episode.
    pub family: Option<String>,
    pub event: Event,
}

/// One session's summary line.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SessionRow {
    pub session: String,
    pub first_ms: u64,
    pub last_ms: u64,
    pub events: u64,
    pub requests: u64,
}

/// The database path for a context directory.
pub fn db_path(dir: &Path) -> PathBuf {
    dir.join(DB_FILE)
}

/// What a corrupt database is renamed with, after [`DB_FILE`] and before the Unix time
/// in milliseconds: `context.sqlite3.corrupt-1767225600000` (its `-wal` and `-shm`
/// follow it under the same name plus their suffix).
pub const CORRUPT_MARK: &str = ".corrupt-";

/// `PRAGMA quick_check` on the database at `path`: `Ok` when sound, what is wrong
/// otherwise (a file that is no database at all included). A file whose header is not
/// SQLite's is judged from the header alone: SQLite is not let near it (closing such a
/// file, SQLite may delete the `-wal` beside it, which belongs with the evidence).
/// Otherwise it is opened read-write, without creating it.
pub fn quick_check(path: &Path) -> Result<(), String> {
    const HEADER: &[u8; 16] = b"SQLite format 3\0";
    let mut head = Vec::with_capacity(HEADER.len());
    std::fs::File::open(path)
        .and_then(|file| std::io::Read::read_to_end(&mut std::io::Read::take(file, 16), &mut head))
        .map_err(|e| e.to_string())?;
    if !head.is_empty() && head != HEADER {
        return Err("not an SQLite database (its header is wrong)".into());
    }
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| e.to_string())?;
    let _ = conn.busy_timeout(Duration::from_secs(5));
    let mut statement = conn
        .prepare("PRAGMA quick_check")
        .map_err(|e| e.to_string())?;
    let verdict: Vec<String> = statement
        .query_map([], |row| row.get(0))
        .and_then(|rows| rows.take(5).collect())
        .map_err(|e| e.to_string())?;
    match verdict.as_slice() {
        [ok] if ok == "ok" => Ok(()),
        _ => Err(verdict.join("; ")),
    }
}

/// Rename the database at `path` and its `-wal` and `-shm` aside to
/// `<path>.corrupt-<now_ms>` (see [`CORRUPT_MARK`]); the database's new path.
pub fn move_aside(path: &Path, now_ms: u64) -> std::io::Result<PathBuf> {
    let aside = PathBuf::from(format!("{}{CORRUPT_MARK}{now_ms}", path.display()));
    for suffix in ["-wal", "-shm"] {
        let side = PathBuf::from(format!("{}{suffix}", path.display()));
        if side.exists() {
            std::fs::rename(&side, format!("{}{suffix}", aside.display()))?;
        }
    }
    std::fs::rename(path, &aside)?;
    Ok(aside)
}

/// The databases moved aside as corrupt in `dir`, oldest first.
pub fn moved_aside(dir: &Path) -> Vec<PathBuf> {
    let prefix = format!("{DB_FILE}{CORRUPT_MARK}");
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| {
            entry.file_name().to_str().is_some_and(|name| {
                name.strip_prefix(&prefix)
                    .is_some_and(|rest| rest.bytes().all(|b| b.is_ascii_digit()))
            })
        })
        .map(|entry| entry.path())
        .collect();
    found.sort();
    found
}

/// Open (creating it private if needed) and migrate the database in `dir`. An existing
/// database that fails `PRAGMA quick_check` is moved aside (see [`move_aside`]), said
/// in an error line, and a fresh one started: appends never go into a malformed file.
pub fn open(dir: &Path) -> Result<Connection, StoreError> {
    let io = |source| StoreError::Io {
        path: dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    glider_sys::fileacl::private_dir(dir).map_err(io)?;
    let path = db_path(dir);
    if path.exists()
        && let Err(why) = quick_check(&path)
    {
        let aside = move_aside(&path, crate::now_ms()).map_err(io)?;
        tracing::error!(
            corrupt = %why,
            moved_to = %aside.display(),
            "context: the database failed its check; moved aside, starting a fresh one"
        );
    }
    let conn = Connection::open(&path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // NORMAL in WAL mode: a commit survives a crash of the process (what SIGKILL does);
    // only a power cut may lose the last transactions, never corrupt the file.
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    migrate(&conn, &path)?;
    make_files_private(dir)?;
    Ok(conn)
}

/// Open an existing database to read (the CLI, the dashboard): `None` when there is
/// none yet. The schema must be one this build knows.
pub fn open_existing(dir: &Path) -> Result<Option<Connection>, StoreError> {
    let path = db_path(dir);
    if !path.exists() {
        return Ok(None);
    }
    let conn = Connection::open_with_flags(
        &path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(Duration::from_secs(5))?;
    migrate(&conn, &path)?;
    Ok(Some(conn))
}

fn migrate(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |row| row.get(0))?;
    let known = MIGRATIONS.len() as i64;
    if version > known {
        return Err(StoreError::TooNew {
            path: path.to_path_buf(),
            found: version,
            known,
        });
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        let tx = conn.unchecked_transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", index as i64 + 1)?;
        tx.commit()?;
    }
    Ok(())
}

/// The database and its WAL and shared-memory files are the owner's alone.
fn make_files_private(dir: &Path) -> Result<(), StoreError> {
    let entries = std::fs::read_dir(dir).map_err(|source| StoreError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_file() {
            glider_sys::fileacl::set_mode(&path, 0o600)
                .map_err(|source| StoreError::Io { path, source })?;
        }
    }
    Ok(())
}

/// Append `events` (with their families) in one transaction; returns their ids, in
/// order. Each session's events go in rows of up to [`MAX_ROW_EVENTS`], in the order
/// given; ids rise with that order within a session (a row's events take the ids just
/// below its own). The writer calls this once per batch, so its statements are
/// prepared once per connection and reused (a transaction opened with
/// `Connection::transaction` parses `BEGIN` and `COMMIT` again each time); `BEGIN
/// IMMEDIATE` takes the write lock first, so the ids it hands out are the newest.
pub fn append<E: Borrow<Event>>(
    conn: &mut Connection,
    events: &[(Option<String>, E)],
) -> Result<Vec<i64>, StoreError> {
    conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
    let inserted = insert_events(conn, events)
        .and_then(|ids| Ok(conn.prepare_cached("COMMIT")?.execute([]).map(|_| ids)?));
    if inserted.is_err() && !conn.is_autocommit() {
        // Nothing of the batch is kept; the caller counts it as lost.
        let _ = conn.execute_batch("ROLLBACK");
    }
    inserted
}

fn insert_events<E: Borrow<Event>>(
    conn: &Connection,
    events: &[(Option<String>, E)],
) -> Result<Vec<i64>, StoreError> {
    let mut insert = conn.prepare_cached(
        "INSERT INTO events (id, at_ms, session, family, kind, body, count, requests, first_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?;
    let mut last_id: i64 = conn
        .prepare_cached("SELECT IFNULL(MAX(id), 0) FROM events")?
        .query_row([], |r| r.get(0))?;
    let mut ids = vec![0; events.len()];
    let event = |at: usize| events[at].1.borrow();
    ROW_BUFFERS.with_borrow_mut(|buffers| -> Result<(), StoreError> {
        for row in rows_by_session(events) {
            let first = event(row[0]);
            let newest = row
                .iter()
                .map(|&at| event(at).at_ms)
                .max()
                .unwrap_or(first.at_ms);
            let requests = row
                .iter()
                .filter(|&&at| matches!(event(at).body, EventBody::Request(_)))
                .count();
            let written = row.iter().map(|&at| {
                let written = event(at);
                (written.at_ms, events[at].0.as_deref(), &written.body)
            });
            buffers.row.clear();
            // How it is stored, said once the row's length is known.
            buffers.row.push(STORED_AS_IS);
            packed::write_row(&mut buffers.row, written)
                .map_err(|source| StoreError::BadEvent { id: -1, source })?;
            let family = row.iter().rev().find_map(|&at| events[at].0.as_deref());
            let oldest = row.iter().map(|&at| event(at).at_ms).min();
            let first_ms = (row.len() > 1).then(|| oldest.unwrap_or(newest) as i64);
            for (offset, &at) in row.iter().enumerate() {
                ids[at] = last_id + 1 + offset as i64;
            }
            last_id += row.len() as i64;
            insert.execute(params![
                last_id,
                newest as i64,
                first.session,
                family,
                PACKED,
                buffers.stored_body(),
                row.len() as i64,
                requests as i64,
                first_ms
            ])?;
        }
        buffers.shrink();
        Ok(())
    })?;
    Ok(ids)
}

thread_local! {
    /// The writer's buffers for a row's packed events and their compressed form, kept between
    /// batches: a busy batch's rows are tens of KB, and allocating (and, for the
    /// compressed one, zeroing) them anew for each was a tenth of the writer's time.
    static ROW_BUFFERS: std::cell::RefCell<RowBuffers> = std::cell::RefCell::default();
}

#[derive(Default)]
struct RowBuffers {
    /// The row's packed events.
    row: Vec<u8>,
    /// Them compressed.
    compressed: Vec<u8>,
    /// The compressor's hash tables, cleared for each row instead of allocated: one of
    /// 16-bit entries for a row under 64 KiB (most), one of 32-bit entries for longer
    /// ones. A table is cleared whole for each row, so a short row does not clear the
    /// larger one (`lz4_flex` would keep a table it once had to enlarge).
    small_table: lz4_flex::block::CompressTable,
    large_table: Option<lz4_flex::block::CompressTable>,
}

/// What [`RowBuffers`] keep between batches at most: a batch of long tool results
/// must not hold megabytes for good.
const ROW_BUFFER_KEPT: usize = 1024 * 1024;

impl RowBuffers {
    fn shrink(&mut self) {
        self.row.clear();
        self.row.shrink_to(ROW_BUFFER_KEPT);
        self.compressed.truncate(ROW_BUFFER_KEPT);
        self.compressed.shrink_to(ROW_BUFFER_KEPT);
    }

    /// `row` as stored: a BLOB of a byte saying how (`row` begins with
    /// [`STORED_AS_IS`]), then the packed events as they are or, past
    /// [`COMPRESS_OVER`], compressed ([`STORED_LZ4`]: their length, 4 bytes
    /// little-endian, and the LZ4 block). Events so long that 4 bytes cannot say their
    /// length are stored as they are.
    fn stored_body(&mut self) -> rusqlite::types::ToSqlOutput<'_> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        let events = &self.row[1..];
        let length = match u32::try_from(events.len()) {
            Ok(length) if events.len() > COMPRESS_OVER => length,
            _ => return ToSqlOutput::Borrowed(ValueRef::Blob(&self.row)),
        };
        let most = 5 + lz4_flex::block::get_maximum_output_size(events.len());
        if self.compressed.len() < most {
            self.compressed.resize(most, 0);
        }
        self.compressed[0] = STORED_LZ4;
        self.compressed[1..5].copy_from_slice(&length.to_le_bytes());
        let table = if events.len() < usize::from(u16::MAX) {
            &mut self.small_table
        } else {
            self.large_table
                .get_or_insert_with(lz4_flex::block::CompressTable::large)
        };
        let size =
            lz4_flex::block::compress_into_with_table(events, &mut self.compressed[5..], table)
                .expect("the output holds the most a block can take");
        ToSqlOutput::Borrowed(ValueRef::Blob(&self.compressed[..5 + size]))
    }
}

/// The first byte of a packed row's BLOB: the packed events follow as they are, or
/// compressed.
const STORED_AS_IS: u8 = 0;
const STORED_LZ4: u8 = 1;

/// A packed row's events as read back (`id`, its first event's, names it in an error).
fn read_packed(
    id: i64,
    body: rusqlite::types::ValueRef<'_>,
) -> Result<Vec<packed::RowEvent>, StoreError> {
    use rusqlite::types::ValueRef;
    let bad = |reason: String| StoreError::BadRow { id, reason };
    let ValueRef::Blob(blob) = body else {
        return Err(bad(format!("a body of type {:?}", body.data_type())));
    };
    let read = |row: &[u8]| packed::read_row(row).map_err(|packed::Malformed(reason)| bad(reason));
    match blob.split_first() {
        Some((&STORED_AS_IS, row)) => read(row),
        Some((&STORED_LZ4, compressed)) => read(&decompress(id, compressed)?),
        Some((other, _)) => Err(bad(format!("stored in an unknown way ({other})"))),
        None => Err(bad("an empty body".into())),
    }
}

/// A compressed body's bytes: its length, 4 bytes little-endian, and an LZ4 block.
fn decompress(id: i64, blob: &[u8]) -> Result<Vec<u8>, StoreError> {
    let bad = |reason: String| StoreError::BadCompression { id, reason };
    let (size, block) = blob
        .split_first_chunk::<4>()
        .ok_or_else(|| bad(format!("{} bytes, no length", blob.len())))?;
    let size = u32::from_le_bytes(*size) as usize;
    if size > MAX_DECOMPRESSED {
        return Err(bad(format!("says it holds {size} bytes")));
    }
    lz4_flex::block::decompress(block, size).map_err(|error| bad(error.to_string()))
}

/// A row's JSON as read back (`id` names it in an error): text as it is, a BLOB
/// decompressed.
fn read_body(id: i64, body: rusqlite::types::ValueRef<'_>) -> Result<Vec<u8>, StoreError> {
    use rusqlite::types::ValueRef;
    let bad = |reason: String| StoreError::BadCompression { id, reason };
    match body {
        ValueRef::Text(text) => Ok(text.to_vec()),
        ValueRef::Blob(blob) => decompress(id, blob),
        other => Err(bad(format!("a body of type {:?}", other.data_type()))),
    }
}

/// `events`' indexes grouped into rows: each session's (in the order it first comes),
/// in order, at most [`MAX_ROW_EVENTS`] a row.
fn rows_by_session<E: Borrow<Event>>(events: &[(Option<String>, E)]) -> Vec<Vec<usize>> {
    let mut sessions: Vec<(Option<&str>, Vec<usize>)> = Vec::new();
    for (at, (_, event)) in events.iter().enumerate() {
        let session = event.borrow().session.as_deref();
        match sessions.iter_mut().find(|(s, _)| *s == session) {
            Some((_, indexes)) => indexes.push(at),
            None => sessions.push((session, vec![at])),
        }
    }
    sessions
        .iter()
        .flat_map(|(_, indexes)| indexes.chunks(MAX_ROW_EVENTS).map(<[usize]>::to_vec))
        .collect()
}

/// Every event of `session` (all events when `None`), oldest first.
pub fn events(conn: &Connection, session: Option<&str>) -> Result<Vec<Stored>, StoreError> {
    events_after(conn, session, i64::MIN)
}

/// The events of `session` (all sessions' when `None`) whose id is above `after`,
/// oldest first: what came since a reader last looked. All of them at once: a reader
/// of a session that may be long reads it a page at a time ([`each_page_after`]).
pub fn events_after(
    conn: &Connection,
    session: Option<&str>,
    after: i64,
) -> Result<Vec<Stored>, StoreError> {
    let mut out = Vec::new();
    each_row_after(conn, session, after, |events| {
        out.extend(events);
        ControlFlow::Continue(())
    })?;
    Ok(out)
}

/// Events a page of [`each_page_after`] holds at most (plus a row's, which is never
/// split): the summarizer's catch-up over a busy session and the writer's load of one
/// it has not seen hold one page at a time, never the whole session.
pub const PAGE_EVENTS: usize = 1024;

/// [`events_after`] a page of at most about `page` events at a time, handed to `each`
/// in order until it breaks: the memory a read takes is a page's, however long the
/// session.
pub fn each_page_after(
    conn: &Connection,
    session: Option<&str>,
    after: i64,
    page: usize,
    mut each: impl FnMut(&[Stored]) -> ControlFlow<()>,
) -> Result<(), StoreError> {
    let mut buffer = Vec::new();
    let mut stopped = false;
    each_row_after(conn, session, after, |events| {
        buffer.extend(events);
        if buffer.len() < page {
            return ControlFlow::Continue(());
        }
        let flow = each(&buffer);
        buffer.clear();
        stopped = flow.is_break();
        flow
    })?;
    if !stopped && !buffer.is_empty() {
        let _ = each(&buffer);
    }
    Ok(())
}

/// The rows of `session` (all sessions' when `None`) that hold events above `after`,
/// oldest first, each handed to `each` as its events above `after`.
fn each_row_after(
    conn: &Connection,
    session: Option<&str>,
    after: i64,
    mut each: impl FnMut(std::iter::Skip<std::vec::IntoIter<Stored>>) -> ControlFlow<()>,
) -> Result<(), StoreError> {
    // A row's id is its newest event's: a row above `after` may begin at or below it.
    let sql = match session {
        Some(_) => {
            "SELECT id, at_ms, session, family, kind, count, body FROM events WHERE session = ?1 AND id > ?2 ORDER BY id"
        }
        None => {
            "SELECT id, at_ms, session, family, kind, count, body FROM events WHERE ?1 IS NULL AND id > ?2 ORDER BY id"
        }
    };
    let mut query = conn.prepare(sql)?;
    let rows = query.query_map(params![session, after], |row| Ok(read_row(row)))?;
    for row in rows {
        let (first_id, session, events) = row??;
        let skipped = after
            .saturating_add(1)
            .saturating_sub(first_id)
            .clamp(0, events.len() as i64) as usize;
        let stored: Vec<Stored> = events
            .into_iter()
            .enumerate()
            .map(|(offset, (at_ms, family, body))| Stored {
                id: first_id + offset as i64,
                family,
                event: Event {
                    at_ms,
                    session: session.clone(),
                    body,
                },
            })
            .collect();
        if each(stored.into_iter().skip(skipped)).is_break() {
            break;
        }
    }
    Ok(())
}

/// A row of `events_after`'s query (`id, at_ms, session, family, kind, count, body`):
/// its first event's id, its session and its events — packed (schema 6), a JSON array
/// of events (schemas 4 and 5) or one event's JSON (schemas 1 to 5).
fn read_row(
    row: &rusqlite::Row<'_>,
) -> Result<(i64, Option<String>, Vec<packed::RowEvent>), StoreError> {
    let id: i64 = row.get(0)?;
    let count: i64 = row.get(5)?;
    // `count` ids end at the row's own; no row holds fewer than one or more than
    // MAX_ROW_EVENTS.
    if !(1..=MAX_ROW_EVENTS as i64).contains(&count) {
        return Err(StoreError::BadRow {
            id,
            reason: format!("its count is {count}"),
        });
    }
    let first_id = id - (count - 1);
    let body = row.get_ref(6)?;
    let events =
        match row.get_ref(4)?.as_str().map_err(rusqlite::Error::from)? {
            PACKED => read_packed(first_id, body)?,
            ROW_OF_EVENTS => {
                let read: Vec<ReadRowEvent> = serde_json::from_slice(&read_body(id, body)?)
                    .map_err(|source| StoreError::BadEvent {
                        id: first_id,
                        source,
                    })?;
                read.into_iter()
                    .map(|e| (e.at_ms, e.family, e.body))
                    .collect()
            }
            _ => {
                let event: EventBody = serde_json::from_slice(&read_body(id, body)?)
                    .map_err(|source| StoreError::BadEvent { id, source })?;
                vec![(row.get::<_, i64>(1)? as u64, row.get(3)?, event)]
            }
        };
    if events.len() as i64 != count {
        return Err(StoreError::BadRow {
            id: first_id,
            reason: format!("{} events where the row counts {count}", events.len()),
        });
    }
    let mut events = events;
    // Rows written before keys were redacted on the way in are redacted on the way out.
    for (_, _, body) in &mut events {
        body.redact_keys();
    }
    Ok((first_id, row.get(2)?, events))
}

/// The sessions in the log, most recently active first.
pub fn sessions(conn: &Connection) -> Result<Vec<SessionRow>, StoreError> {
    let mut query = conn.prepare(
        "SELECT session, MIN(IFNULL(first_ms, at_ms)), MAX(at_ms), SUM(count), SUM(requests)
         FROM events WHERE session IS NOT NULL GROUP BY session ORDER BY MAX(id) DESC",
    )?;
    let rows = query.query_map([], |row| {
        Ok(SessionRow {
            session: row.get(0)?,
            first_ms: row.get::<_, i64>(1)? as u64,
            last_ms: row.get::<_, i64>(2)? as u64,
            events: row.get::<_, i64>(3)? as u64,
            requests: row.get::<_, i64>(4)? as u64,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The newest turn family of `session`, to continue it after a restart.
pub fn last_family(conn: &Connection, session: &str) -> Result<Option<String>, StoreError> {
    Ok(conn
        .query_row(
            "SELECT family FROM events WHERE session = ?1 AND family IS NOT NULL ORDER BY id DESC LIMIT 1",
            [session],
            |r| r.get(0),
        )
        .optional()?
        .flatten())
}

/// The `limit` sessions with the newest events, newest first.
pub fn recent_sessions(conn: &Connection, limit: usize) -> Result<Vec<String>, StoreError> {
    let mut query = conn.prepare(
        "SELECT session FROM events WHERE session IS NOT NULL
         GROUP BY session ORDER BY MAX(id) DESC LIMIT ?1",
    )?;
    let rows = query.query_map([limit as i64], |row| row.get::<_, String>(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The id of `session`'s oldest event (`None` when the log holds none of it). Only
/// retention and forgetting delete events, and both delete a session's oldest first
/// (or all of it): a reader that saw this id before and sees it again knows nothing it
/// read was deleted since.
pub fn first_id(conn: &Connection, session: &str) -> Result<Option<i64>, StoreError> {
    Ok(conn
        .query_row(
            "SELECT id - count + 1 FROM events WHERE session = ?1 ORDER BY id LIMIT 1",
            [session],
            |r| r.get(0),
        )
        .optional()?)
}

/// The id of `session`'s newest event (`None` when the log holds none of it).
pub fn last_id(conn: &Connection, session: &str) -> Result<Option<i64>, StoreError> {
    Ok(conn.query_row(
        "SELECT MAX(id) FROM events WHERE session = ?1",
        [session],
        |r| r.get(0),
    )?)
}

/// SQLite's `data_version` of `conn`: it changes when another connection commits (a
/// forget from the dashboard or the CLI), not when `conn` itself does.
pub fn data_version(conn: &Connection) -> Result<i64, StoreError> {
    Ok(conn.pragma_query_value(None, "data_version", |r| r.get(0))?)
}

/// Delete `session`'s events and log that it was forgotten (the log keeps no trace of
/// the session's content, only that a deletion happened). Returns how many went.
pub fn forget(conn: &mut Connection, session: &str, now_ms: u64) -> Result<u64, StoreError> {
    let tx = conn.transaction()?;
    let deleted = delete_counted(&tx, "session = ?1", [session])?;
    if deleted > 0 {
        let body = EventBody::Forgotten { deleted };
        tx.execute(
            "INSERT INTO events (at_ms, session, family, kind, body) VALUES (?1, NULL, NULL, ?2, ?3)",
            params![now_ms as i64, body.kind(), json(&body)],
        )?;
    }
    tx.commit()?;
    Ok(deleted)
}

/// How long and how large the log may grow.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Retention {
    /// Events older than this are deleted.
    pub max_age_ms: u64,
    /// Bytes of live pages the database may hold; beyond, the oldest events go until
    /// it holds 90 % of this.
    pub max_bytes: u64,
}

/// Apply `retention` now; each deletion is itself logged. Returns the events deleted.
pub fn apply_retention(
    conn: &mut Connection,
    retention: Retention,
    now_ms: u64,
) -> Result<u64, StoreError> {
    let mut deleted = 0;
    let cutoff = now_ms.saturating_sub(retention.max_age_ms);
    let aged = delete_logged(conn, "age", cutoff, |tx| {
        // Events are appended oldest first, so those older than the cutoff are the ones
        // before the first that is not: found by walking ids from the oldest, which reads
        // only the rows it deletes (no time index to keep on every insert). An event
        // stamped a moment earlier than one appended before it goes at the next pass.
        // A row goes once its newest event is old (`at_ms`): an older event in a row
        // with a newer one waits for the next pass too.
        delete_counted(
            tx,
            "id < IFNULL(
                (SELECT id FROM events WHERE at_ms >= ?1 ORDER BY id LIMIT 1),
                (SELECT MAX(id) + 1 FROM events))",
            [cutoff as i64],
        )
    })?;
    deleted += aged;
    // Oldest first, a slice at a time, until the live pages fit.
    while live_bytes(conn)? > retention.max_bytes {
        let target = retention.max_bytes / 10 * 9;
        let total: i64 = conn.query_row("SELECT COUNT(*) FROM events", [], |r| r.get(0))?;
        if total <= 1 {
            break;
        }
        let share = (live_bytes(conn)?.saturating_sub(target) as f64
            / live_bytes(conn)?.max(1) as f64)
            .clamp(0.01, 1.0);
        let slice = ((total as f64 * share).ceil() as i64).clamp(1, total - 1);
        let before: i64 = conn.query_row(
            "SELECT at_ms FROM events ORDER BY id LIMIT 1 OFFSET ?1",
            [slice],
            |r| r.get(0),
        )?;
        let gone = delete_logged(conn, "size", before as u64, |tx| {
            delete_counted(
                tx,
                "id IN (SELECT id FROM events ORDER BY id LIMIT ?1)",
                [slice],
            )
        })?;
        if gone == 0 {
            break;
        }
        deleted += gone;
    }
    deleted += retain_responses(conn, cutoff)?;
    Ok(deleted)
}

/// Stored responses follow the events' retention: none older than `cutoff`, nor older
/// than the oldest event size retention left. Logged as a `responses` retention event.
fn retain_responses(conn: &mut Connection, cutoff: u64) -> Result<u64, StoreError> {
    let oldest_event: Option<i64> = conn
        .query_row(
            "SELECT IFNULL(first_ms, at_ms) FROM events ORDER BY id LIMIT 1",
            [],
            |r| r.get(0),
        )
        .optional()?;
    let before = oldest_event.map_or(cutoff, |oldest| cutoff.max(oldest as u64));
    delete_logged(conn, "responses", before, |tx| {
        Ok(tx.execute("DELETE FROM responses WHERE at_ms < ?1", [before as i64])? as u64)
    })
}

/// Delete the rows `condition` selects; returns how many events they held.
fn delete_counted(
    tx: &rusqlite::Transaction<'_>,
    condition: &str,
    params: impl rusqlite::Params,
) -> Result<u64, StoreError> {
    let mut delete = tx.prepare(&format!(
        "DELETE FROM events WHERE {condition} RETURNING count"
    ))?;
    let counts = delete.query_map(params, |r| r.get::<_, i64>(0))?;
    let mut events = 0u64;
    for count in counts {
        events += count? as u64;
    }
    Ok(events)
}

/// Run `delete` and, when it deleted anything, log a retention event in the same
/// transaction.
fn delete_logged(
    conn: &mut Connection,
    reason: &str,
    before_ms: u64,
    delete: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<u64, StoreError>,
) -> Result<u64, StoreError> {
    let tx = conn.transaction()?;
    let deleted = delete(&tx)?;
    if deleted > 0 {
        let body = EventBody::Retention {
            reason: reason.to_owned(),
            deleted,
            before_ms,
        };
        tx.execute(
            "INSERT INTO events (at_ms, session, family, kind, body) VALUES (?1, NULL, NULL, ?2, ?3)",
            params![crate::now_ms() as i64, body.kind(), json(&body)],
        )?;
        tracing::info!(
            reason,
            deleted,
            before_ms,
            "context retention deleted events"
        );
    }
    tx.commit()?;
    Ok(deleted)
}

/// Bytes in pages that hold data (a deletion frees pages for reuse without shrinking
/// the file).
pub fn live_bytes(conn: &Connection) -> Result<u64, StoreError> {
    let pages: i64 = conn.pragma_query_value(None, "page_count", |r| r.get(0))?;
    let free: i64 = conn.pragma_query_value(None, "freelist_count", |r| r.get(0))?;
    let size: i64 = conn.pragma_query_value(None, "page_size", |r| r.get(0))?;
    Ok(((pages - free).max(0) * size) as u64)
}

/// `PRAGMA integrity_check`'s verdict (`ok` when sound).
pub fn integrity(conn: &Connection) -> Result<String, StoreError> {
    Ok(conn.query_row("PRAGMA integrity_check", [], |r| r.get(0))?)
}

fn json(body: &EventBody) -> String {
    // An EventBody is plain data (strings, numbers, JSON values): it always serializes.
    serde_json::to_string(body).unwrap_or_else(|_| String::from("{}"))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn gap(at_ms: u64) -> (Option<String>, Event) {
        (
            None,
            Event {
                at_ms,
                session: Some("s".into()),
                body: EventBody::Gap { dropped: 1 },
            },
        )
    }

    /// The store's own events (gaps, retention, forgetting).
    fn store_events(conn: &Connection) -> Vec<Stored> {
        let mut all = events(conn, None).expect("read");
        all.retain(|s| s.event.session.is_none());
        all
    }

    #[test]
    fn a_corrupt_database_is_moved_aside_with_its_wal_and_a_fresh_one_works() {
        let home = tempfile::tempdir().expect("tempdir");
        let dir = home.path().join("context");
        let mut conn = open(&dir).expect("opens");
        append(&mut conn, &[gap(1)]).expect("appends");
        drop(conn);
        let path = db_path(&dir);
        // Garbage over the header and the first pages; a stale WAL beside it.
        let mut bytes = std::fs::read(&path).expect("read");
        let garbage = 4096.min(bytes.len());
        bytes[..garbage].fill(0x5a);
        std::fs::write(&path, &bytes).expect("write");
        std::fs::write(dir.join(format!("{DB_FILE}-wal")), b"junk").expect("wal");
        assert!(quick_check(&path).is_err());

        let mut conn = open(&dir).expect("a fresh database");
        let aside = moved_aside(&dir);
        assert_eq!(aside.len(), 1, "{aside:?}");
        assert_eq!(std::fs::read(&aside[0]).expect("kept"), bytes);
        assert!(PathBuf::from(format!("{}-wal", aside[0].display())).exists());
        assert_eq!(quick_check(&path), Ok(()));
        append(&mut conn, &[gap(2)]).expect("appends to the fresh one");
        assert_eq!(events(&conn, None).expect("reads").len(), 1);
    }

    #[test]
    fn damaged_pages_behind_a_sound_header_fail_the_quick_check() {
        let home = tempfile::tempdir().expect("tempdir");
        let dir = home.path().join("context");
        let mut conn = open(&dir).expect("opens");
        let many: Vec<_> = (0..500).map(gap).collect();
        append(&mut conn, &many).expect("appends");
        drop(conn);
        let path = db_path(&dir);
        assert_eq!(quick_check(&path), Ok(()));
        let mut bytes = std::fs::read(&path).expect("read");
        assert!(bytes.len() > 3 * 4096, "{} bytes", bytes.len());
        let end = bytes.len();
        bytes[4096..end].fill(0x5a);
        std::fs::write(&path, &bytes).expect("write");
        assert!(quick_check(&path).is_err());
        open(&dir).expect("a fresh database");
        assert_eq!(moved_aside(&dir).len(), 1);
    }

    #[test]
    fn a_new_store_is_private_migrated_and_in_wal_mode() {
        let home = tempfile::tempdir().expect("tempdir");
        let dir = home.path().join("context");
        let conn = open(&dir).expect("opens");
        let mode = |p: &Path| std::fs::metadata(p).expect("exists").permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&db_path(&dir)), 0o600);
        let journal: String = conn
            .pragma_query_value(None, "journal_mode", |r| r.get(0))
            .expect("pragma");
        assert_eq!(journal, "wal");
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .expect("pragma");
        assert_eq!(version, MIGRATIONS.len() as i64);
        drop(conn);
        // Opening again runs no migration twice.
        open(&dir).expect("reopens");
    }

    #[test]
    fn a_batch_that_cannot_commit_is_rolled_back_and_the_next_one_goes_in() {
        let home = tempfile::tempdir().expect("tempdir");
        let mut conn = open(home.path()).expect("opens");
        conn.busy_timeout(Duration::ZERO).expect("no wait");
        append(&mut conn, &[gap(1)]).expect("appends");
        // Another connection holds the write lock: the insert fails at once.
        let blocker = open(home.path()).expect("opens");
        blocker.execute_batch("BEGIN IMMEDIATE").expect("locks");
        append(&mut conn, &[gap(2), gap(3)]).expect_err("busy");
        assert!(conn.is_autocommit(), "no transaction is left open");
        blocker.execute_batch("COMMIT").expect("unlocks");
        let ids = append(&mut conn, &[gap(4)]).expect("appends after");
        assert_eq!(ids.len(), 1);
        let stored = events(&conn, Some("s")).expect("reads");
        let times: Vec<u64> = stored.iter().map(|s| s.event.at_ms).collect();
        assert_eq!(times, [1, 4], "nothing of the failed batch was kept");
    }

    #[test]
    fn a_database_from_a_newer_glider_is_refused_with_a_clear_error() {
        let home = tempfile::tempdir().expect("tempdir");
        let conn = open(home.path()).expect("opens");
        conn.pragma_update(None, "user_version", 99)
            .expect("pragma");
        drop(conn);
        let error = open(home.path()).expect_err("refused").to_string();
        assert!(error.contains("schema version 99"), "{error}");
    }

    #[test]
    fn retention_by_age_deletes_old_events_and_logs_it() {
        let home = tempfile::tempdir().expect("tempdir");
        let mut conn = open(home.path()).expect("opens");
        // Two batches: a row of two events, then one of one.
        append(&mut conn, &[gap(1_000), gap(2_000)]).expect("append");
        append(&mut conn, &[gap(50_000)]).expect("append");
        let retention = Retention {
            max_age_ms: 10_000,
            max_bytes: u64::MAX,
        };
        let deleted = apply_retention(&mut conn, retention, 55_000).expect("retention");
        assert_eq!(deleted, 2, "events are counted, not rows");
        let left = store_events(&conn);
        assert_eq!(left.len(), 1, "the store-level retention event");
        assert_eq!(
            left[0].event.body,
            EventBody::Retention {
                reason: "age".into(),
                deleted: 2,
                before_ms: 45_000
            }
        );
        assert_eq!(events(&conn, Some("s")).expect("read").len(), 1);
    }

    #[test]
    fn retention_by_age_walks_the_ids_without_a_time_index() {
        let home = tempfile::tempdir().expect("tempdir");
        let mut conn = open(home.path()).expect("opens");
        let indexes: Vec<String> = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'events'")
            .expect("prepare")
            .query_map([], |r| r.get(0))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows");
        assert_eq!(indexes, ["events_by_session"]);
        // Appended in this order, a batch each: the third was stamped before the second.
        for at_ms in [1_000, 60_000, 2_000, 70_000] {
            append(&mut conn, &[gap(at_ms)]).expect("append");
        }
        let retention = Retention {
            max_age_ms: 10_000,
            max_bytes: u64::MAX,
        };
        let at_ms = |conn: &Connection| -> Vec<u64> {
            events(conn, Some("s"))
                .expect("read")
                .iter()
                .map(|e| e.event.at_ms)
                .collect()
        };
        assert_eq!(
            apply_retention(&mut conn, retention, 60_000).expect("retention"),
            1
        );
        assert_eq!(at_ms(&conn), [60_000, 2_000, 70_000], "the late one waits");
        assert_eq!(
            apply_retention(&mut conn, retention, 75_000).expect("retention"),
            2
        );
        assert_eq!(at_ms(&conn), [70_000]);
        assert_eq!(
            apply_retention(&mut conn, retention, 99_000).expect("retention"),
            1
        );
        assert_eq!(at_ms(&conn), Vec::<u64>::new(), "all of them old: all gone");
    }

    #[test]
    fn retention_by_size_deletes_the_oldest_until_the_log_fits() {
        let home = tempfile::tempdir().expect("tempdir");
        let mut conn = open(home.path()).expect("opens");
        let many: Vec<_> = (0..4000).map(|i| gap(10_000 + i)).collect();
        append(&mut conn, &many).expect("append");
        let before = live_bytes(&conn).expect("size");
        let retention = Retention {
            max_age_ms: u64::MAX,
            max_bytes: before / 2,
        };
        let deleted = apply_retention(&mut conn, retention, 20_000).expect("retention");
        assert!(deleted > 0);
        assert!(live_bytes(&conn).expect("size") <= before / 2);
        let kept = events(&conn, Some("s")).expect("read");
        assert_eq!(kept.len() as u64, 4000 - deleted);
        assert_eq!(
            kept.last().map(|s| s.event.at_ms),
            Some(10_000 + 3999),
            "the newest stay"
        );
        let logged = store_events(&conn);
        assert!(!logged.is_empty());
        assert!(logged.iter().all(
            |s| matches!(&s.event.body, EventBody::Retention { reason, .. } if reason == "size")
        ));
    }

    fn event(session: &str, at_ms: u64, body: EventBody) -> (Option<String>, Event) {
        (
            Some(format!("family-{session}")),
            Event {
                at_ms,
                session: Some(session.into()),
                body,
            },
        )
    }

    #[test]
    fn a_batch_is_a_row_per_session_and_each_event_keeps_an_id_of_its_own() {
        let home = tempfile::tempdir().expect("tempdir");
        let mut conn = open(home.path()).expect("opens");
        let request = || EventBody::Request(Default::default());
        let reply = || EventBody::Reply(Default::default());
        append(&mut conn, &[gap(1)]).expect("append");
        // Two sessions interleaved, and one long enough for two rows.
        let mut batch = vec![
            event("a", 10, request()),
            event("b", 11, request()),
            event("a", 12, reply()),
            event("b", 13, reply()),
        ];
        batch.extend((0..MAX_ROW_EVENTS as u64 + 1).map(|i| event("c", 20 + i, request())));
        let ids = append(&mut conn, &batch).expect("append");
        let rows: i64 = conn
            .query_row("SELECT COUNT(*) FROM events", [], |r| r.get(0))
            .expect("count");
        assert_eq!(rows, 1 + 2 + 2, "the gap, a and b, and c's two rows");
        let mut unique = ids.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), batch.len(), "{ids:?}");
        assert!(
            ids.iter().all(|&id| id > 1),
            "after the gap's id 1: {ids:?}"
        );
        for session in ["a", "b", "c"] {
            let wanted: Vec<(i64, u64, Option<String>, &EventBody)> = batch
                .iter()
                .zip(&ids)
                .filter(|((_, e), _)| e.session.as_deref() == Some(session))
                .map(|((family, e), &id)| (id, e.at_ms, family.clone(), &e.body))
                .collect();
            let read = events(&conn, Some(session)).expect("read");
            let got: Vec<(i64, u64, Option<String>, &EventBody)> = read
                .iter()
                .map(|s| (s.id, s.event.at_ms, s.family.clone(), &s.event.body))
                .collect();
            assert_eq!(
                got, wanted,
                "session {session}: its events, ids and families"
            );
            assert!(got.windows(2).all(|w| w[0].0 < w[1].0), "ids rise");
            assert_eq!(
                last_id(&conn, session).expect("last"),
                wanted.last().map(|w| w.0)
            );
            assert_eq!(
                last_family(&conn, session).expect("family"),
                Some(format!("family-{session}"))
            );
        }
        let summary = sessions(&conn).expect("sessions");
        let c = summary.iter().find(|r| r.session == "c").expect("c");
        assert_eq!(
            (c.first_ms, c.last_ms, c.events, c.requests),
            (
                20,
                20 + MAX_ROW_EVENTS as u64,
                MAX_ROW_EVENTS as u64 + 1,
                MAX_ROW_EVENTS as u64 + 1
            )
        );
        let a = summary.iter().find(|r| r.session == "a").expect("a");
        assert_eq!(
            (a.first_ms, a.last_ms, a.events, a.requests),
            (10, 12, 2, 1)
        );
        assert_eq!(
            forget(&mut conn, "c", 99).expect("forget"),
            MAX_ROW_EVENTS as u64 + 1
        );
        // A later batch's ids come after every id still in the log (as SQLite's own
        // rowids would: the ids of a forgotten newest session may be handed out again).
        let newest: i64 = conn
            .query_row("SELECT MAX(id) FROM events", [], |r| r.get(0))
            .expect("max");
        let later = append(&mut conn, &[event("a", 30, request())]).expect("append");
        assert_eq!(later, [newest + 1]);
        let a: Vec<i64> = events(&conn, Some("a"))
            .expect("read")
            .iter()
            .map(|s| s.id)
            .collect();
        assert!(
            a.windows(2).all(|w| w[0] < w[1]),
            "a's ids still rise: {a:?}"
        );
    }

    #[test]
    fn a_reader_reads_what_came_after_an_id_even_inside_a_row() {
        let home = tempfile::tempdir().expect("tempdir");
        let mut conn = open(home.path()).expect("opens");
        // Rows of three events (ids 1-3) and two (4-5).
        append(&mut conn, &[gap(1), gap(2), gap(3)]).expect("append");
        append(&mut conn, &[gap(4), gap(5)]).expect("append");
        let after = |id| {
            events_after(&conn, Some("s"), id)
                .expect("reads")
                .iter()
                .map(|s| (s.id, s.event.at_ms))
                .collect::<Vec<_>>()
        };
        assert_eq!(after(1), [(2, 2), (3, 3), (4, 4), (5, 5)]);
        assert_eq!(after(3), [(4, 4), (5, 5)]);
        assert_eq!(after(4), [(5, 5)]);
        assert_eq!(after(5), []);
        assert_eq!(after(i64::MIN).len(), 5);
        assert_eq!(first_id(&conn, "s").expect("reads"), Some(1));
        // Retention takes the oldest row: the session's first id says so.
        apply_retention(
            &mut conn,
            Retention {
                max_age_ms: 10,
                max_bytes: u64::MAX,
            },
            14,
        )
        .expect("retention");
        assert_eq!(first_id(&conn, "s").expect("reads"), Some(4));
        assert_eq!(first_id(&conn, "none").expect("reads"), None);
    }

    #[test]
    fn a_paged_read_holds_a_page_at_a_time_and_stops_when_told() {
        let home = tempfile::tempdir().expect("tempdir");
        let mut conn = open(home.path()).expect("opens");
        // Rows of three events (ids 1-3), two (4-5) and three (6-8).
        append(&mut conn, &[gap(1), gap(2), gap(3)]).expect("append");
        append(&mut conn, &[gap(4), gap(5)]).expect("append");
        append(&mut conn, &[gap(6), gap(7), gap(8)]).expect("append");
        let pages = |after, page, stop_after: usize| {
            let mut seen: Vec<Vec<i64>> = Vec::new();
            each_page_after(&conn, Some("s"), after, page, |events| {
                seen.push(events.iter().map(|s| s.id).collect());
                if seen.len() == stop_after {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })
            .expect("reads");
            seen
        };
        // A page is handed on once it holds `page` events; a row is never split.
        assert_eq!(pages(i64::MIN, 4, 9), [vec![1, 2, 3, 4, 5], vec![6, 7, 8]]);
        assert_eq!(
            pages(i64::MIN, 1, 9),
            [vec![1, 2, 3], vec![4, 5], vec![6, 7, 8]]
        );
        assert_eq!(pages(2, 2, 9), [vec![3, 4, 5], vec![6, 7, 8]]);
        assert_eq!(pages(i64::MIN, 100, 9), [vec![1, 2, 3, 4, 5, 6, 7, 8]]);
        // A break ends the read: the rest is neither read nor handed on.
        assert_eq!(pages(i64::MIN, 1, 1), [vec![1, 2, 3]]);
        assert!(pages(8, 1, 9).is_empty());
        // Every page together is what one read returns.
        let whole: Vec<i64> = events_after(&conn, Some("s"), 2)
            .expect("reads")
            .iter()
            .map(|s| s.id)
            .collect();
        assert_eq!(pages(2, 3, 9).concat(), whole);
    }

    #[test]
    fn a_long_row_is_stored_compressed_and_reads_back_the_same() {
        let home = tempfile::tempdir().expect("tempdir");
        let mut conn = open(home.path()).expect("opens");
        let goal = |n: usize| {
            EventBody::Request(crate::event::RequestEvent {
                request: format!("r{n}"),
                root: true,
                user_text: Some(format!("goal {n}: ").repeat(20)),
                ..Default::default()
            })
        };
        let batch: Vec<_> = (0..30).map(|n| event("busy", n as u64, goal(n))).collect();
        let mut ids = append(&mut conn, &batch).expect("append");
        ids.extend(append(&mut conn, &[event("quiet", 99, goal(99))]).expect("append"));
        let kinds: Vec<(String, String, String)> = conn
            .prepare("SELECT session, kind, hex(substr(body, 1, 1)) FROM events ORDER BY id")
            .expect("query")
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .expect("rows")
            .collect::<Result<_, _>>()
            .expect("read");
        assert_eq!(
            kinds,
            [
                ("busy".into(), PACKED.into(), "01".into()),
                ("quiet".into(), PACKED.into(), "00".into())
            ],
            "the batch's row is past {COMPRESS_OVER} bytes packed, the single event is not"
        );
        let stored = events(&conn, None).expect("reads");
        let read: Vec<(i64, Option<String>, Event)> = stored
            .into_iter()
            .map(|s| (s.id, s.family, s.event))
            .collect();
        let written: Vec<(i64, Option<String>, Event)> = batch
            .into_iter()
            .chain([event("quiet", 99, goal(99))])
            .zip(&ids)
            .map(|((family, event), &id)| (id, family, event))
            .collect();
        assert_eq!(read, written);
    }

    #[test]
    fn short_long_and_short_rows_compress_and_read_back() {
        let home = tempfile::tempdir().expect("tempdir");
        let mut conn = open(home.path()).expect("opens");
        let goal = |n: usize, words: usize| {
            EventBody::Request(crate::event::RequestEvent {
                request: format!("r{n}"),
                root: true,
                user_text: Some(format!("goal {n}, ").repeat(words)),
                ..Default::default()
            })
        };
        // Short, long (past 64 KiB: the 32-bit table), short again (the 16-bit one,
        // which the long row did not replace).
        let batches: Vec<Vec<_>> = [(0, 30, 20), (100, 40, 250), (200, 30, 20)]
            .into_iter()
            .map(|(from, count, words)| {
                (from..from + count)
                    .map(|n| event("s", n as u64, goal(n, words)))
                    .collect()
            })
            .collect();
        let mut ids = Vec::new();
        for batch in &batches {
            ids.extend(append(&mut conn, batch).expect("append"));
        }
        let stored_as: Vec<(String, i64)> = conn
            .prepare("SELECT hex(substr(body, 1, 1)), length(body) FROM events ORDER BY id")
            .expect("query")
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("rows")
            .collect::<Result<_, _>>()
            .expect("read");
        assert_eq!(stored_as.len(), 3);
        assert!(
            stored_as.iter().all(|(how, _)| how == "01"),
            "{stored_as:?}"
        );
        let read: Vec<(i64, Event)> = events(&conn, None)
            .expect("reads")
            .into_iter()
            .map(|s| (s.id, s.event))
            .collect();
        let written: Vec<(i64, Event)> = batches
            .into_iter()
            .flatten()
            .zip(ids)
            .map(|((_, event), id)| (id, event))
            .collect();
        assert_eq!(read, written);
    }

    #[test]
    fn a_damaged_compressed_row_is_a_clear_error_not_an_allocation() {
        let home = tempfile::tempdir().expect("tempdir");
        let mut conn = open(home.path()).expect("opens");
        let long = EventBody::Compaction(crate::event::CompactionEvent {
            narrative: "n".repeat(2 * COMPRESS_OVER),
            ..Default::default()
        });
        let id = append(&mut conn, &[event("s", 1, long)]).expect("append")[0];
        for (damage, says) in [
            (
                &[STORED_LZ4, 0xff, 0xff, 0xff, 0x7f, 0][..],
                "says it holds 2147483647 bytes",
            ),
            (
                &[STORED_LZ4, 16, 0, 0, 0, 0xf0, 1, 2][..],
                "does not decompress",
            ),
            (&[STORED_LZ4, 1, 2][..], "2 bytes, no length"),
            (
                &[STORED_AS_IS, 1, 1, 5, 0][..],
                "ends at byte 4 inside a tag",
            ),
            (&[7, 1][..], "stored in an unknown way (7)"),
            (&[][..], "an empty body"),
        ] {
            conn.execute(
                "UPDATE events SET body = ?1 WHERE id = ?2",
                params![damage, id],
            )
            .expect("damage");
            let error = events(&conn, Some("s")).expect_err("damaged").to_string();
            assert!(error.contains(&format!("event {id} ")), "{error}");
            assert!(error.contains(says), "{error}");
        }
    }

    #[test]
    fn a_row_holding_more_events_than_it_counts_is_a_clear_error() {
        let home = tempfile::tempdir().expect("tempdir");
        let mut conn = open(home.path()).expect("opens");
        let id = append(&mut conn, &[gap(1)]).expect("append")[0];
        let (_, one) = gap(2);
        let mut two = vec![STORED_AS_IS];
        packed::write_row(
            &mut two,
            [(1, None, &one.body), (2, None, &one.body)].into_iter(),
        )
        .expect("packs");
        conn.execute("UPDATE events SET body = ?1", params![two])
            .expect("damage");
        let error = events(&conn, None).expect_err("damaged").to_string();
        assert!(error.contains(&format!("event {id} ")), "{error}");
        assert!(error.contains("2 events where the row counts 1"), "{error}");
    }

    #[test]
    fn a_row_whose_count_no_row_can_have_is_a_clear_error() {
        let home = tempfile::tempdir().expect("tempdir");
        let mut conn = open(home.path()).expect("opens");
        let id = append(&mut conn, &[gap(1), gap(2)]).expect("append")[1];
        for count in [0, -1, i64::MIN, MAX_ROW_EVENTS as i64 + 1, i64::MAX] {
            conn.execute("UPDATE events SET count = ?1", params![count])
                .expect("damage");
            let error = events(&conn, None).expect_err("damaged").to_string();
            assert!(error.contains(&format!("event {id} ")), "{error}");
            assert!(error.contains(&format!("its count is {count}")), "{error}");
        }
    }

    #[test]
    fn a_row_goes_by_age_once_its_newest_event_is_old() {
        let home = tempfile::tempdir().expect("tempdir");
        let mut conn = open(home.path()).expect("opens");
        append(&mut conn, &[gap(1_000), gap(30_000)]).expect("append");
        let retention = Retention {
            max_age_ms: 10_000,
            max_bytes: u64::MAX,
        };
        // The older event is past the cutoff, the newer one not: the row waits.
        assert_eq!(
            apply_retention(&mut conn, retention, 20_000).expect("retention"),
            0
        );
        assert_eq!(events(&conn, Some("s")).expect("read").len(), 2);
        assert_eq!(
            apply_retention(&mut conn, retention, 45_000).expect("retention"),
            2
        );
        assert!(events(&conn, Some("s")).expect("read").is_empty());
    }

    #[test]
    fn a_store_of_schema_3_is_migrated_with_its_events_and_ids() {
        let home = tempfile::tempdir().expect("tempdir");
        let path = db_path(home.path());
        {
            let conn = Connection::open(&path).expect("opens");
            for sql in &MIGRATIONS[..3] {
                conn.execute_batch(sql).expect("old schema");
            }
            conn.pragma_update(None, "user_version", 3).expect("pragma");
            for (id, kind, body) in [
                (7, "request", json(&EventBody::Request(Default::default()))),
                (9, "reply", json(&EventBody::Reply(Default::default()))),
            ] {
                conn.execute(
                    "INSERT INTO events (id, at_ms, session, family, kind, body) VALUES (?1, 5, 's', 'f', ?2, ?3)",
                    params![id, kind, body],
                )
                .expect("old row");
            }
        }
        let mut conn = open(home.path()).expect("migrates");
        let read: Vec<i64> = events(&conn, Some("s"))
            .expect("read")
            .iter()
            .map(|s| s.id)
            .collect();
        assert_eq!(read, [7, 9]);
        let summary = sessions(&conn).expect("sessions");
        assert_eq!((summary[0].events, summary[0].requests), (2, 1));
        let ids = append(&mut conn, &[gap(6), gap(7)]).expect("append");
        assert_eq!(ids, [10, 11], "after the old rows' ids");
    }

    /// A schema 5 file's rows (one event's JSON, a JSON array of events as text and
    /// compressed) read as they did, and beside them the packed rows written now.
    #[test]
    fn rows_of_json_from_schema_5_read_beside_packed_ones() {
        #[derive(serde::Serialize)]
        struct RowEvent<'a> {
            at_ms: u64,
            #[serde(skip_serializing_if = "Option::is_none")]
            family: Option<&'a str>,
            body: &'a EventBody,
        }
        let home = tempfile::tempdir().expect("tempdir");
        let path = db_path(home.path());
        let request = EventBody::Request(crate::event::RequestEvent {
            request: "r-1".into(),
            user_text: Some("fix \"it\"".into()),
            root: true,
            ..Default::default()
        });
        let reply = EventBody::Reply(crate::event::ReplyEvent {
            request: "r-1".into(),
            status: Some(200),
            ..Default::default()
        });
        let array = serde_json::to_vec(&[
            RowEvent {
                at_ms: 2,
                family: Some("r-1"),
                body: &request,
            },
            RowEvent {
                at_ms: 3,
                family: None,
                body: &reply,
            },
        ])
        .expect("serializes");
        let mut compressed = (array.len() as u32).to_le_bytes().to_vec();
        compressed.extend(lz4_flex::block::compress(&array));
        {
            let conn = Connection::open(&path).expect("opens");
            for sql in &MIGRATIONS[..5] {
                conn.execute_batch(sql).expect("old schema");
            }
            conn.pragma_update(None, "user_version", 5).expect("pragma");
            let insert = "INSERT INTO events (id, at_ms, session, family, kind, body, count, requests) VALUES (?1, ?2, 's', 'r-1', ?3, ?4, ?5, ?6)";
            conn.execute(
                insert,
                params![1, 1, "gap", json(&EventBody::Gap { dropped: 4 }), 1, 0],
            )
            .expect("one event");
            conn.execute(
                insert,
                params![
                    3,
                    3,
                    ROW_OF_EVENTS,
                    String::from_utf8(array).expect("UTF-8"),
                    2,
                    1
                ],
            )
            .expect("a row as text");
            conn.execute(insert, params![5, 3, ROW_OF_EVENTS, compressed, 2, 1])
                .expect("a row compressed");
        }
        let mut conn = open(home.path()).expect("migrates");
        let ids = append(&mut conn, &[event("s", 4, request.clone())]).expect("append");
        assert_eq!(ids, [6]);
        let read: Vec<(i64, u64, Option<String>, EventBody)> = events(&conn, Some("s"))
            .expect("reads")
            .into_iter()
            .map(|s| (s.id, s.event.at_ms, s.family, s.event.body))
            .collect();
        let family = || Some("r-1".to_owned());
        assert_eq!(
            read,
            [
                (1, 1, family(), EventBody::Gap { dropped: 4 }),
                (2, 2, family(), request.clone()),
                (3, 3, None, reply.clone()),
                (4, 2, family(), request.clone()),
                (5, 3, None, reply),
                (6, 4, Some("family-s".to_owned()), request),
            ]
        );
    }

    #[test]
    fn forgetting_a_session_deletes_only_its_events_and_logs_the_count() {
        let home = tempfile::tempdir().expect("tempdir");
        let mut conn = open(home.path()).expect("opens");
        let mut other = gap(5);
        other.1.session = Some("t".into());
        append(&mut conn, &[gap(1), gap(2), other]).expect("append");
        assert_eq!(forget(&mut conn, "s", 9).expect("forget"), 2);
        assert!(events(&conn, Some("s")).expect("read").is_empty());
        assert_eq!(events(&conn, Some("t")).expect("read").len(), 1);
        let logged = store_events(&conn);
        assert_eq!(logged.len(), 1);
        assert_eq!(logged[0].event.body, EventBody::Forgotten { deleted: 2 });
        assert_eq!(forget(&mut conn, "nobody", 9).expect("forget"), 0);
    }
}
