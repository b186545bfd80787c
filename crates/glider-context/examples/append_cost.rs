//! The context writer's per-event work outside Glider: batches of one sticky session's
//! request and reply events (the shape `bench/callgrind.sh openai small` writes)
//! appended with `store::append` and folded live (given boxed to the fold, as the writer
//! does). Prints the time a batch's append and fold take per event, and the process's
//! CPU time per event (`/proc/self/stat`).
//! `VARIED=1` gives every request a different user text (less to compress).
//!
//!   cargo run --release -p glider-context --example append_cost -- [batch] [batches]
//!
//! At saturation a batch holds about 40 events; under valgrind one to three.
use glider_context::event::{Event, EventBody, ReplyEvent, RequestEvent};
use glider_context::graph::Folder;
use glider_context::store;
use std::time::Instant;

const SESSION: &str = "prefix:bench";

fn main() {
    let mut args = std::env::args().skip(1);
    let batch: usize = args.next().map_or(40, |a| a.parse().expect("batch size"));
    let batches: usize = args.next().map_or(500, |a| a.parse().expect("batch count"));
    let varied = std::env::var_os("VARIED").is_some();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut conn = store::open(dir.path()).expect("open the store");
    let mut folder = Folder::live(SESSION);
    let mut request_no = 0u64;
    let (mut append_ns, mut fold_ns) = (0u128, 0u128);
    for _ in 0..batches {
        let mut rows = Vec::with_capacity(batch + 1);
        while rows.len() < batch {
            request_no += 1;
            let user_text = if varied {
                varied_text(request_no)
            } else {
                "Explain what this repository does. ".repeat(10)
            };
            rows.extend(exchange(request_no, user_text));
        }
        let started = Instant::now();
        let ids = store::append(&mut conn, &rows).expect("append");
        append_ns += started.elapsed().as_nanos();
        let started = Instant::now();
        for ((family, event), _) in rows.into_iter().zip(&ids) {
            folder.feed_owned(event, family);
        }
        fold_ns += started.elapsed().as_nanos();
    }
    let events = (batch * batches) as u128;
    println!(
        "{events} events in batches of {batch}{}: append {} ns/event, fold {} ns/event, process CPU {} ns/event",
        if varied { " (varied text)" } else { "" },
        append_ns / events,
        fold_ns / events,
        cpu_ns() / events,
    );
}

/// A local request and its reply, with their family (the request's own key).
fn exchange(request_no: u64, user_text: String) -> [(Option<String>, Box<Event>); 2] {
    let request = format!("1796410153129-{request_no}");
    let at_ms = 1_796_410_157_000 + request_no;
    let event = |at_ms, body| {
        (
            Some(request.clone()),
            Box::new(Event {
                at_ms,
                session: Some(SESSION.into()),
                body,
            }),
        )
    };
    [
        event(
            at_ms,
            EventBody::Request(RequestEvent {
                request: request.clone(),
                door: "gateway".into(),
                front: "openai_chat".into(),
                model_requested: "bench-chat".into(),
                model: "bench-chat".into(),
                rule: "model".into(),
                reason: "bench-chat is served by vllm".into(),
                backend: Some("vllm".into()),
                local: Some(true),
                estimated_tokens: 213,
                root: true,
                user_text: Some(user_text),
                ..RequestEvent::default()
            }),
        ),
        event(
            at_ms + 2,
            EventBody::Reply(ReplyEvent {
                request: request.clone(),
                backend: Some("vllm".into()),
                model: Some("bench-chat".into()),
                local: Some(true),
                status: Some(200),
                input_tokens: 239,
                output_tokens: 3,
                stop_reason: Some("end_turn".into()),
                ttft_ms: Some(1),
                total_ms: Some(2),
                text: Some("Benchmark reply".into()),
                ..ReplyEvent::default()
            }),
        ),
    ]
}

/// Sixty words and numbers, different for each seed.
fn varied_text(seed: u64) -> String {
    const WORDS: [&str; 16] = [
        "the",
        "file",
        "test",
        "error",
        "run",
        "cargo",
        "fix",
        "src/main.rs",
        "why",
        "does",
        "panic",
        "when",
        "index",
        "out",
        "of",
        "bounds",
    ];
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut text = String::new();
    for _ in 0..60 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        text.push_str(WORDS[(x % 16) as usize]);
        text.push(' ');
        if x.is_multiple_of(7) {
            text.push_str(&(x % 100_000).to_string());
            text.push(' ');
        }
    }
    text
}

/// The process's user and system time so far, in nanoseconds.
fn cpu_ns() -> u128 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    let after_name = stat.rsplit(')').next().expect("a stat line");
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: u128 =
        fields[11].parse::<u128>().expect("utime") + fields[12].parse::<u128>().expect("stime");
    let per_second = 100; // USER_HZ on Linux
    ticks * 1_000_000_000 / per_second
}
