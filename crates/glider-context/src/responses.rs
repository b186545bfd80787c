//! Stored Responses: what makes the Responses API's `previous_response_id` work through
//! Glider whatever backend answered. Each stored response keeps the request's own input
//! items, the response it continued, and the Response object the client got (whose
//! `output` items are the model's turn). A chain is read back link by link.
//!
//! Consistency: [`ResponseStore::put`] puts the response in an in-memory map at once (the
//! gateway does so before the reply's last byte reaches the client), and hands the SQLite
//! write to a bounded queue that one thread drains, a batch per transaction, so a request
//! never waits on the disk and a follow-up request right after finds the response. A
//! delete leaves a tombstone in the map until its write is done. After a restart only
//! what was committed is found.
//!
//! Memory: a response is kept as the JSON text it is written as (a parsed tree of a
//! Codex turn's input is several times its text), and the map is bounded in bytes: a
//! response leaves it once written and older than the newest [`RECENT_BYTES`]; one not
//! yet written stays. Writes waiting hold at most [`MAX_PENDING_BYTES`]; past that (the
//! disk cannot keep up) a write is dropped, counted and warned about, and that response
//! then lives only as long as the map keeps it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::batch;
use crate::store::{self, StoreError};

/// Bytes of written responses the in-memory map keeps (newest first) for follow-ups
/// that come soon; older ones are read back from SQLite.
pub const RECENT_BYTES: usize = 16 * 1024 * 1024;
/// Entries (responses and tombstones) the map keeps, whatever their size.
const RECENT: usize = 4096;
/// Bytes of responses waiting for the writer before a new write is dropped.
pub const MAX_PENDING_BYTES: usize = 64 * 1024 * 1024;
/// Most writes committed in one transaction.
const MAX_BATCH: usize = 256;
/// Links followed in one chain before it is refused as runaway.
const MAX_CHAIN: usize = 10_000;

/// One stored response, as JSON text (parsed only when read back).
#[derive(Debug, Clone)]
pub struct StoredResponse {
    /// The Response object's `id`, as the client saw it.
    pub id: String,
    pub at_ms: u64,
    /// The response this one continued (`previous_response_id`).
    pub previous: Option<String>,
    /// The request's own input items (its earlier turns are the chain's): a JSON array.
    pub input: Box<RawValue>,
    /// The Response object as the client got it.
    pub response: Box<RawValue>,
}

impl StoredResponse {
    /// The request's own input items.
    pub fn input_items(&self) -> Vec<Value> {
        match serde_json::from_str::<Value>(self.input.get()) {
            Ok(Value::Array(items)) => items,
            Ok(other) => vec![other],
            Err(_) => Vec::new(),
        }
    }

    /// The model's turn: the Response object's `output` items.
    pub fn output(&self) -> Vec<Value> {
        #[derive(serde::Deserialize)]
        struct Output {
            #[serde(default)]
            output: Vec<Value>,
        }
        serde_json::from_str::<Output>(self.response.get())
            .map_or_else(|_| Vec::new(), |o| o.output)
    }

    /// What it holds in memory, about (its texts).
    fn size(&self) -> usize {
        self.id.len()
            + self.previous.as_ref().map_or(0, String::len)
            + self.input.get().len()
            + self.response.get().len()
    }
}

/// Why a chain could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    #[error("response {0:?} is not stored (never stored, `store: false`, deleted or expired)")]
    NotFound(String),
    #[error("the chain of previous responses from {0:?} loops or is longer than {MAX_CHAIN}")]
    Runaway(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

enum Write {
    Put(Arc<StoredResponse>),
    Delete(String),
    Flush(mpsc::Sender<()>),
}

impl Write {
    /// The bytes it holds while it waits (counted against [`MAX_PENDING_BYTES`]).
    fn size(&self) -> usize {
        match self {
            Write::Put(response) => response.size(),
            Write::Delete(id) => id.len(),
            Write::Flush(_) => 0,
        }
    }
}

/// One entry of the map: `response` `None` is a tombstone (deleted).
struct Entry {
    response: Option<Arc<StoredResponse>>,
    /// Its write is queued and not committed: it must stay, SQLite does not have it yet.
    unwritten: bool,
    bytes: usize,
}

/// The in-memory map, oldest first in `order`.
#[derive(Default)]
struct Recent {
    by_id: HashMap<String, Entry>,
    order: VecDeque<String>,
    bytes: usize,
}

impl Recent {
    fn insert(&mut self, id: String, response: Option<Arc<StoredResponse>>) {
        let bytes = response.as_ref().map_or(id.len(), |r| r.size());
        let entry = Entry {
            response,
            unwritten: true,
            bytes,
        };
        match self.by_id.insert(id.clone(), entry) {
            Some(old) => self.bytes -= old.bytes,
            None => self.order.push_back(id),
        }
        self.bytes += bytes;
        self.evict();
    }

    /// The write of `id`'s entry `what` is done (committed, failed or dropped): unless
    /// a newer put or delete replaced it, it may leave the map.
    fn settled(&mut self, id: &str, what: Option<&Arc<StoredResponse>>) {
        if let Some(entry) = self.by_id.get_mut(id) {
            let same = match (&entry.response, what) {
                (Some(kept), Some(done)) => Arc::ptr_eq(kept, done),
                (None, None) => true,
                _ => false,
            };
            if same {
                entry.unwritten = false;
            }
        }
    }

    /// Drop the oldest written entries while the map is over its bounds. Writes are
    /// committed in order, so an unwritten oldest entry means the rest wait too.
    fn evict(&mut self) {
        while self.bytes > RECENT_BYTES || self.order.len() > RECENT {
            let Some(oldest) = self.order.front() else {
                break;
            };
            if self.by_id.get(oldest).is_some_and(|entry| entry.unwritten) {
                break;
            }
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some(entry) = self.by_id.remove(&oldest) {
                self.bytes -= entry.bytes;
            }
        }
    }
}

/// What the requests and the writer share.
#[derive(Default)]
struct Shared {
    recent: Mutex<Recent>,
    /// Bytes of the writes queued and not yet done.
    pending_bytes: AtomicUsize,
    dropped: AtomicU64,
}

impl Shared {
    fn recent(&self) -> MutexGuard<'_, Recent> {
        self.recent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `writes` are done (or dropped): they leave the pending count, and their entries
    /// may leave the map.
    fn settled(&self, writes: &[Write]) {
        let mut recent = self.recent();
        for write in writes {
            match write {
                Write::Put(response) => recent.settled(&response.id, Some(response)),
                Write::Delete(id) => recent.settled(id, None),
                Write::Flush(_) => continue,
            }
            self.pending_bytes
                .fetch_sub(write.size(), Ordering::Relaxed);
        }
        recent.evict();
    }
}

/// The store of responses, over the context database.
pub struct ResponseStore {
    dir: PathBuf,
    shared: Arc<Shared>,
    sender: Option<SyncSender<Write>>,
    writer: Option<JoinHandle<()>>,
}

impl ResponseStore {
    /// Open the database in `dir` (the context directory) and start the writer, whose
    /// queue holds `queue_capacity` writes.
    pub fn start(dir: &Path, queue_capacity: usize) -> Result<ResponseStore, StoreError> {
        let conn = store::open(dir)?;
        let (sender, receiver) = mpsc::sync_channel(queue_capacity.max(1));
        let shared = Arc::new(Shared::default());
        let writer_shared = shared.clone();
        let writer = std::thread::Builder::new()
            .name("glider-responses-writer".into())
            .spawn(move || write_all(conn, receiver, &writer_shared))
            .map_err(|source| StoreError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        Ok(ResponseStore {
            dir: dir.to_path_buf(),
            shared,
            sender: Some(sender),
            writer: Some(writer),
        })
    }

    /// Store `response`: found at once, written without waiting.
    pub fn put(&self, response: StoredResponse) {
        let response = Arc::new(response);
        self.shared
            .recent()
            .insert(response.id.clone(), Some(response.clone()));
        self.queue(Write::Put(response));
    }

    /// The response stored under `id`, if any.
    pub fn get(&self, id: &str) -> Result<Option<Arc<StoredResponse>>, StoreError> {
        if let Some(entry) = self.shared.recent().by_id.get(id) {
            return Ok(entry.response.clone());
        }
        let Some(conn) = store::open_existing(&self.dir)? else {
            return Ok(None);
        };
        Ok(read(&conn, id)?.map(Arc::new))
    }

    /// Delete the response stored under `id`; whether there was one.
    pub fn delete(&self, id: &str) -> Result<bool, StoreError> {
        let existed = self.get(id)?.is_some();
        if existed {
            self.shared.recent().insert(id.to_owned(), None);
            self.queue(Write::Delete(id.to_owned()));
        }
        Ok(existed)
    }

    /// The input and output items of the chain ending at `id`, oldest turn first: what
    /// a request with `previous_response_id: id` continues.
    pub fn history(&self, id: &str) -> Result<Vec<Value>, ChainError> {
        let mut links = Vec::new();
        let mut seen = HashSet::new();
        let mut next = Some(id.to_owned());
        while let Some(current) = next {
            if !seen.insert(current.clone()) || links.len() >= MAX_CHAIN {
                return Err(ChainError::Runaway(id.to_owned()));
            }
            let link = self
                .get(&current)?
                .ok_or_else(|| ChainError::NotFound(current.clone()))?;
            next = link.previous.clone();
            links.push(link);
        }
        Ok(links
            .iter()
            .rev()
            .flat_map(|link| {
                let mut items = link.input_items();
                items.extend(link.output());
                items
            })
            .collect())
    }

    /// Wait until every write queued so far is committed (tests, shutdown).
    pub fn flush(&self) {
        let Some(sender) = &self.sender else { return };
        let (done, wait) = mpsc::channel();
        if sender.send(Write::Flush(done)).is_ok() {
            let _ = wait.recv();
        }
    }

    /// Writes dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Bytes the in-memory map holds (responses and tombstones).
    pub fn memory_bytes(&self) -> usize {
        self.shared.recent().bytes
    }

    fn queue(&self, write: Write) {
        let Some(sender) = &self.sender else { return };
        let size = write.size();
        let pending = self.shared.pending_bytes.fetch_add(size, Ordering::Relaxed) + size;
        let refused = if pending > MAX_PENDING_BYTES {
            Err(write)
        } else {
            sender.try_send(write).map_err(|error| match error {
                mpsc::TrySendError::Full(write) | mpsc::TrySendError::Disconnected(write) => write,
            })
        };
        if let Err(write) = refused {
            self.shared.settled(std::slice::from_ref(&write));
            let dropped = self.shared.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::warn!(
                dropped,
                "stored-responses queue full: a write was dropped (the response stays only in memory)"
            );
        }
    }
}

impl Drop for ResponseStore {
    fn drop(&mut self) {
        self.sender.take();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

/// The writer: what is queued goes in one transaction (at most [`MAX_BATCH`] writes,
/// gathered as [`batch`] says); a flush is answered once everything before it is
/// committed.
fn write_all(mut conn: Connection, receiver: Receiver<Write>, shared: &Shared) {
    let mut last_commit = None;
    while let Ok(first) = receiver.recv() {
        let batch = batch::gather(
            &receiver,
            first,
            batch::due_after(last_commit),
            MAX_BATCH,
            |write| matches!(write, Write::Flush(_)),
        );
        let written = write_batch(&mut conn, &batch);
        last_commit = Some(std::time::Instant::now());
        if let Err(error) = written {
            tracing::warn!(%error, writes = batch.len(), "stored-response writes failed");
        }
        shared.settled(&batch);
        for write in batch {
            if let Write::Flush(done) = write {
                let _ = done.send(());
            }
        }
    }
}

fn write_batch(conn: &mut Connection, batch: &[Write]) -> Result<(), StoreError> {
    let tx = conn.transaction()?;
    for write in batch {
        match write {
            Write::Put(response) => {
                tx.prepare_cached(
                    "INSERT OR REPLACE INTO responses (id, at_ms, previous, input, response) VALUES (?1, ?2, ?3, ?4, ?5)",
                )?
                .execute(params![
                    response.id,
                    response.at_ms as i64,
                    response.previous,
                    response.input.get(),
                    response.response.get(),
                ])?;
            }
            Write::Delete(id) => {
                tx.prepare_cached("DELETE FROM responses WHERE id = ?1")?
                    .execute([id])?;
            }
            Write::Flush(_) => {}
        }
    }
    tx.commit()?;
    Ok(())
}

fn read(conn: &Connection, id: &str) -> Result<Option<StoredResponse>, StoreError> {
    let row = conn
        .query_row(
            "SELECT at_ms, previous, input, response FROM responses WHERE id = ?1",
            [id],
            |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, Option<String>>(1)?,
                    row.get::<_, String>(2)?,
                    row.get::<_, String>(3)?,
                ))
            },
        )
        .optional()?;
    let Some((at_ms, previous, input, response)) = row else {
        return Ok(None);
    };
    let raw = |text: String| {
        RawValue::from_string(text).map_err(|source| StoreError::BadEvent { id: -1, source })
    };
    Ok(Some(StoredResponse {
        id: id.to_owned(),
        at_ms: at_ms as u64,
        previous,
        input: raw(input)?,
        response: raw(response)?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stored(id: &str, previous: Option<&str>, said: &str, answered: &str) -> StoredResponse {
        StoredResponse {
            id: id.into(),
            at_ms: 1,
            previous: previous.map(str::to_owned),
            input: raw(&json!([{"role": "user", "content": said}])),
            response: raw(&json!({"id": id, "object": "response", "output": [
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": answered}]}]})),
        }
    }

    fn raw(value: &Value) -> Box<RawValue> {
        serde_json::value::to_raw_value(value).expect("serializes")
    }

    #[test]
    fn the_map_keeps_what_is_not_written_and_a_bounded_number_of_bytes_of_the_rest() {
        let mut recent = Recent::default();
        let big = "x".repeat(RECENT_BYTES / 4);
        let responses: Vec<Arc<StoredResponse>> = (0..8)
            .map(|n| Arc::new(stored(&format!("resp_{n}"), None, &big, "ok")))
            .collect();
        for response in &responses {
            recent.insert(response.id.clone(), Some(response.clone()));
        }
        assert_eq!(recent.by_id.len(), 8, "nothing unwritten leaves the map");
        for response in &responses[..6] {
            recent.settled(&response.id, Some(response));
        }
        recent.evict();
        assert!(recent.bytes <= RECENT_BYTES, "{} bytes kept", recent.bytes);
        assert!(
            !recent.by_id.contains_key("resp_0"),
            "the oldest written one left"
        );
        assert!(
            recent.by_id.contains_key("resp_7"),
            "the unwritten ones stay"
        );
        assert!(recent.by_id.contains_key("resp_6"));
        // A write that finished for an entry a newer put replaced does not free the newer.
        let newer = Arc::new(stored("resp_7", None, "again", "ok"));
        recent.insert("resp_7".into(), Some(newer));
        recent.settled("resp_7", Some(&responses[7]));
        assert!(recent.by_id["resp_7"].unwritten);
    }

    #[test]
    fn written_responses_beyond_the_map_are_read_back_from_sqlite() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = ResponseStore::start(dir.path(), 64).expect("starts");
        let big = "y".repeat(RECENT_BYTES / 8);
        for n in 0..24 {
            store.put(stored(
                &format!("resp_{n}"),
                None,
                &big,
                &format!("answer {n}"),
            ));
        }
        store.flush();
        assert!(
            store.memory_bytes() <= RECENT_BYTES,
            "{} bytes in memory after the writes committed",
            store.memory_bytes()
        );
        let oldest = store.get("resp_0").expect("reads").expect("found on disk");
        assert_eq!(oldest.input_items()[0]["content"], big.as_str());
        assert_eq!(oldest.output()[0]["content"][0]["text"], "answer 0");
        assert_eq!(store.dropped(), 0);
    }

    #[test]
    fn a_chain_is_read_back_oldest_first_from_memory_and_after_a_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = ResponseStore::start(dir.path(), 16).expect("starts");
        store.put(stored("resp_1", None, "one", "uno"));
        store.put(stored("resp_2", Some("resp_1"), "two", "dos"));
        let expected = vec![
            json!({"role": "user", "content": "one"}),
            store.get("resp_1").expect("reads").expect("found").output()[0].clone(),
            json!({"role": "user", "content": "two"}),
            store.get("resp_2").expect("reads").expect("found").output()[0].clone(),
        ];
        assert_eq!(
            store.history("resp_2").expect("chain"),
            expected,
            "from memory"
        );
        drop(store);
        let reopened = ResponseStore::start(dir.path(), 16).expect("starts");
        assert_eq!(
            reopened.history("resp_2").expect("chain"),
            expected,
            "from SQLite"
        );
        assert!(matches!(
            reopened.history("resp_9"),
            Err(ChainError::NotFound(id)) if id == "resp_9"
        ));
    }

    #[test]
    fn a_delete_hides_the_response_at_once_and_breaks_its_chain() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = ResponseStore::start(dir.path(), 16).expect("starts");
        store.put(stored("resp_1", None, "one", "uno"));
        store.put(stored("resp_2", Some("resp_1"), "two", "dos"));
        assert!(store.delete("resp_1").expect("deletes"));
        assert!(store.get("resp_1").expect("reads").is_none(), "tombstoned");
        assert!(!store.delete("resp_1").expect("deletes"), "already gone");
        assert!(matches!(store.history("resp_2"), Err(ChainError::NotFound(id)) if id == "resp_1"));
        store.flush();
        let conn = store::open_existing(dir.path())
            .expect("opens")
            .expect("exists");
        assert!(
            read(&conn, "resp_1").expect("reads").is_none(),
            "deleted on disk"
        );
        assert!(read(&conn, "resp_2").expect("reads").is_some());
    }
}
