//! Stored Responses: what makes the Responses API's `previous_response_id` work through
//! Glider whatever backend answered. Each stored response keeps the request's own input
//! items, the response it continued, and the Response object the client got (whose
//! `output` items are the model's turn). A chain is read back link by link.
//!
//! Consistency: [`ResponseStore::put`] puts the response in an in-memory map of recent
//! responses at once (the gateway does so before the reply's last byte reaches the
//! client), and hands the SQLite write to a bounded queue that one thread drains, so a
//! request never waits on the disk and a follow-up request right after finds the
//! response. A delete leaves a tombstone in the map until its write is done. After a
//! restart only what was committed is found. A write dropped because the queue was full
//! is counted and warned about; the response then lives only as long as the map keeps
//! it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;

use crate::store::{self, StoreError};

/// Responses (and tombstones) the in-memory map holds; beyond, the oldest leave it
/// (they stay in SQLite).
const RECENT: usize = 4096;
/// Links followed in one chain before it is refused as runaway.
const MAX_CHAIN: usize = 10_000;

/// One stored response.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredResponse {
    /// The Response object's `id`, as the client saw it.
    pub id: String,
    pub at_ms: u64,
    /// The response this one continued (`previous_response_id`).
    pub previous: Option<String>,
    /// The request's own input items (its earlier turns are the chain's).
    pub input: Vec<Value>,
    /// The Response object as the client got it.
    pub response: Value,
}

impl StoredResponse {
    /// The model's turn: the Response object's `output` items.
    pub fn output(&self) -> &[Value] {
        self.response
            .get("output")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
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

/// The recent map: `None` is a tombstone (deleted, the delete not yet written).
#[derive(Default)]
struct Recent {
    by_id: HashMap<String, Option<Arc<StoredResponse>>>,
    order: VecDeque<String>,
}

impl Recent {
    fn insert(&mut self, id: String, entry: Option<Arc<StoredResponse>>) {
        if self.by_id.insert(id.clone(), entry).is_none() {
            self.order.push_back(id);
        }
        while self.order.len() > RECENT {
            if let Some(old) = self.order.pop_front() {
                self.by_id.remove(&old);
            }
        }
    }
}

/// The store of responses, over the context database.
pub struct ResponseStore {
    dir: PathBuf,
    recent: Mutex<Recent>,
    sender: Option<SyncSender<Write>>,
    writer: Option<JoinHandle<()>>,
    dropped: AtomicU64,
}

impl ResponseStore {
    /// Open the database in `dir` (the context directory) and start the writer, whose
    /// queue holds `queue_capacity` writes.
    pub fn start(dir: &Path, queue_capacity: usize) -> Result<ResponseStore, StoreError> {
        let conn = store::open(dir)?;
        let (sender, receiver) = mpsc::sync_channel(queue_capacity.max(1));
        let writer = std::thread::Builder::new()
            .name("glider-responses-writer".into())
            .spawn(move || write_all(conn, receiver))
            .map_err(|source| StoreError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        Ok(ResponseStore {
            dir: dir.to_path_buf(),
            recent: Mutex::default(),
            sender: Some(sender),
            writer: Some(writer),
            dropped: AtomicU64::new(0),
        })
    }

    /// Store `response`: found at once, written without waiting.
    pub fn put(&self, response: StoredResponse) {
        let response = Arc::new(response);
        self.recent()
            .insert(response.id.clone(), Some(response.clone()));
        self.queue(Write::Put(response));
    }

    /// The response stored under `id`, if any.
    pub fn get(&self, id: &str) -> Result<Option<Arc<StoredResponse>>, StoreError> {
        if let Some(entry) = self.recent().by_id.get(id) {
            return Ok(entry.clone());
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
            self.recent().insert(id.to_owned(), None);
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
            .flat_map(|link| link.input.iter().chain(link.output()).cloned())
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
        self.dropped.load(Ordering::Relaxed)
    }

    fn queue(&self, write: Write) {
        let Some(sender) = &self.sender else { return };
        if sender.try_send(write).is_err() {
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::warn!(
                dropped,
                "stored-responses queue full: a write was dropped (the response stays only in memory)"
            );
        }
    }

    fn recent(&self) -> MutexGuard<'_, Recent> {
        self.recent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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

fn write_all(mut conn: Connection, receiver: Receiver<Write>) {
    while let Ok(write) = receiver.recv() {
        let written = match write {
            Write::Put(response) => insert(&mut conn, &response),
            Write::Delete(id) => conn
                .execute("DELETE FROM responses WHERE id = ?1", [&id])
                .map(drop)
                .map_err(StoreError::from),
            Write::Flush(done) => {
                let _ = done.send(());
                Ok(())
            }
        };
        if let Err(error) = written {
            tracing::warn!(%error, "a stored-response write failed");
        }
    }
}

fn insert(conn: &mut Connection, response: &StoredResponse) -> Result<(), StoreError> {
    conn.execute(
        "INSERT OR REPLACE INTO responses (id, at_ms, previous, input, response) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![
            response.id,
            response.at_ms as i64,
            response.previous,
            Value::Array(response.input.clone()).to_string(),
            response.response.to_string(),
        ],
    )?;
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
    let parse = |text: &str| {
        serde_json::from_str::<Value>(text)
            .map_err(|source| StoreError::BadEvent { id: -1, source })
    };
    Ok(Some(StoredResponse {
        id: id.to_owned(),
        at_ms: at_ms as u64,
        previous,
        input: match parse(&input)? {
            Value::Array(items) => items,
            other => vec![other],
        },
        response: parse(&response)?,
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
            input: vec![json!({"role": "user", "content": said})],
            response: json!({"id": id, "object": "response", "output": [
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": answered}]}]}),
        }
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
