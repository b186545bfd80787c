//! The fan-out (spec package `orchestrator`): a request sent to more than one
//! candidate at once instead of one after another. `hedge` starts the next candidate
//! when the local one has sent no first byte by the delay (a fixed `fan_out.delay_ms`,
//! else the local backend's measured p95 time to first byte) and keeps whichever sends
//! a byte first; `first` starts every candidate and keeps the first complete answer;
//! `all` waits for every candidate and keeps the route's own choice, each other answer
//! recorded beside it ([`super::compare`]). A loser of `hedge` or `first` is cancelled
//! at once: its attempt is dropped, which drops its connection. (`shadow` answers through
//! the backup sequence; [`super::shadow`] sends its copy.)
//! Nothing reaches the client until a winner is chosen, so there is never a second
//! stream, nor a hedge after the first byte went out. docs/fan-out.md.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use glider_backend::executor::{attempt, attempt_order, prepared_request};
use glider_backend::{AttemptFailure, Candidate, Executed, UpstreamRequest, UpstreamResponse};
use glider_config::{FanOutConfig, FanOutMode};
use glider_vocab::{ComparedAnswer, FanOutRecord};

use super::compare::Answer;

/// First-byte times kept per backend for its p95 (the most recent ones).
const TTFT_SAMPLES: usize = 256;

/// Each backend's recent times to first byte, measured by the fan-out's own attempts:
/// a hedge's cancelled local attempt counts with the time it had waited, a lower bound,
/// so a backend that keeps losing does not look faster than it is.
#[derive(Default)]
pub struct TtftBook {
    samples: Mutex<HashMap<String, VecDeque<Duration>>>,
}

impl TtftBook {
    fn add(&self, backend: &str, took: Duration) {
        let mut samples = self
            .samples
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let ring = samples.entry(backend.to_owned()).or_default();
        if ring.len() == TTFT_SAMPLES {
            ring.pop_front();
        }
        ring.push_back(took);
    }

    /// The p95 of `backend`'s samples, once it has at least `min_samples`.
    pub fn p95(&self, backend: &str, min_samples: usize) -> Option<Duration> {
        let samples = self
            .samples
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let ring = samples.get(backend).filter(|r| r.len() >= min_samples)?;
        let mut sorted: Vec<Duration> = ring.iter().copied().collect();
        sorted.sort_unstable();
        // Nearest rank: the smallest sample at or above 95 % of them.
        let rank = (sorted.len() * 95).div_ceil(100).max(1);
        sorted.get(rank - 1).copied()
    }
}

/// The candidates a fan-out may send to, in attempt order; `None` when the request
/// goes through the backup sequence instead: fan-out off, a reserve held back
/// (`routing.local_fallback`), or a hedge whose first candidate is not local or has
/// nothing behind it.
pub(crate) fn applies(
    mode: FanOutMode,
    candidates: &[Candidate],
    reserve: Option<usize>,
) -> Option<Vec<usize>> {
    // Off (the default) and shadow (the primary goes through the backup sequence, its
    // copy is sent after) are told before the attempt order is worked out: the backup
    // sequence works it out again itself.
    if matches!(mode, FanOutMode::Off | FanOutMode::Shadow)
        || reserve.is_some()
        || candidates.len() < 2
    {
        return None;
    }
    let order = attempt_order(candidates, candidates.len());
    match mode {
        FanOutMode::Off | FanOutMode::Shadow => None,
        FanOutMode::Hedge => order
            .first()
            .is_some_and(|&i| candidates[i].backend.is_local())
            .then_some(order),
        FanOutMode::First | FanOutMode::All => Some(order),
    }
}

/// The hedge's delay for `local`: the configured one, else its p95, else the initial.
pub(crate) fn hedge_delay(
    config: &FanOutConfig,
    fixed: Option<Duration>,
    book: &TtftBook,
    local: &str,
) -> Duration {
    fixed
        .or_else(|| book.p95(local, config.min_samples))
        .unwrap_or(Duration::from_millis(config.initial_delay_ms))
}

type Attempt<'a> = Pin<
    Box<
        dyn Future<Output = (usize, Result<UpstreamResponse, AttemptFailure>, Duration)>
            + Send
            + 'a,
    >,
>;

/// One candidate's attempt, tagged with its index and how long it took. `whole`: read
/// the reply to its end before it counts as an answer (modes `first` and `all`).
fn start<'a>(
    candidates: &'a [Candidate],
    requests: &'a [UpstreamRequest],
    index: usize,
    whole: bool,
) -> Attempt<'a> {
    Box::pin(async move {
        let started = Instant::now();
        let candidate = &candidates[index];
        let request = || prepared_request(requests, index, candidate);
        let mut result = attempt(candidate, request).await;
        if whole && let Ok(response) = result {
            result = read_whole(response).await;
        }
        (index, result, started.elapsed())
    })
}

/// The reply read to its end, as one chunk (a stream's events, all at once).
pub(crate) async fn read_whole(
    response: UpstreamResponse,
) -> Result<UpstreamResponse, AttemptFailure> {
    let status = response.status;
    let content_type = response.content_type.clone();
    let body: Bytes = response.collect().await?;
    Ok(UpstreamResponse {
        status,
        content_type,
        first_chunk: body,
        rest: Box::pin(futures_util::stream::empty()),
    })
}

/// Send to the candidates in `order` as `mode` says; the answer kept and what the
/// fan-out did, or every failure when none answered. `delay` is the hedge's.
pub(crate) async fn run(
    mode: FanOutMode,
    candidates: &[Candidate],
    requests: &[UpstreamRequest],
    order: Vec<usize>,
    delay: Duration,
    book: &TtftBook,
) -> Result<(Executed, FanOutRecord), Vec<AttemptFailure>> {
    if mode == FanOutMode::All {
        return run_all(candidates, requests, order).await;
    }
    let hedging = mode == FanOutMode::Hedge;
    let started = Instant::now();
    let mut waiting = order.into_iter();
    let mut running: FuturesUnordered<Attempt<'_>> = FuturesUnordered::new();
    let mut running_on: Vec<usize> = Vec::new();
    let mut failures = Vec::new();
    let first_local = waiting.next();
    if let Some(index) = first_local {
        running.push(start(candidates, requests, index, !hedging));
        running_on.push(index);
    }
    if !hedging {
        for index in waiting.by_ref() {
            running.push(start(candidates, requests, index, true));
            running_on.push(index);
        }
    }
    let timer = tokio::time::sleep(delay);
    tokio::pin!(timer);
    let mut armed = hedging;
    let mut fired = false;
    let mut stop_launching = false;
    loop {
        tokio::select! {
            finished = running.next() => {
                let Some((index, result, _)) = finished else {
                    return Err(failures);
                };
                running_on.retain(|&i| i != index);
                let name = candidates[index].backend.name();
                match result {
                    Ok(response) => {
                        // The local model's time to first byte: its own when it won,
                        // what it had waited when it lost (a lower bound).
                        if hedging
                            && let Some(local) = first_local
                            && (local == index || running_on.contains(&local))
                        {
                            book.add(candidates[local].backend.name(), started.elapsed());
                        }
                        drop(running);
                        let cancelled = running_on
                            .iter()
                            .map(|&i| candidates[i].backend.name().to_owned())
                            .collect();
                        let record = FanOutRecord {
                            mode: if hedging { "hedge" } else { "first" }.to_owned(),
                            fired,
                            delay_ms: hedging.then_some(delay.as_millis() as u64),
                            winner: name.to_owned(),
                            cancelled,
                            answers: Vec::new(),
                        };
                        return Ok((Executed { index, response, failures }, record));
                    }
                    Err(failure) => {
                        // Failed before the delay: the next starts now, as in the
                        // backup sequence, and there is nothing left to hedge.
                        armed = false;
                        stop_launching |= !failure.retryable;
                        failures.push(failure);
                        if running.is_empty() {
                            match waiting.next().filter(|_| !stop_launching) {
                                Some(next) => {
                                    running.push(start(candidates, requests, next, !hedging));
                                    running_on.push(next);
                                }
                                None => return Err(failures),
                            }
                        }
                    }
                }
            }
            () = &mut timer, if armed => {
                armed = false;
                if let Some(next) = waiting.next() {
                    fired = true;
                    tracing::debug!(backend = candidates[next].backend.name(), delay_ms = delay.as_millis() as u64, "hedge: the local model is slow to its first byte");
                    running.push(start(candidates, requests, next, false));
                    running_on.push(next);
                }
            }
        }
    }
}

/// Mode `all`: every candidate runs to the end of its answer; the client gets the
/// first in attempt order that answered (the route's own choice, or what the backup
/// sequence would have fallen back to), and every answer is compared with it.
async fn run_all(
    candidates: &[Candidate],
    requests: &[UpstreamRequest],
    order: Vec<usize>,
) -> Result<(Executed, FanOutRecord), Vec<AttemptFailure>> {
    let mut running: FuturesUnordered<Attempt<'_>> = order
        .iter()
        .map(|&index| start(candidates, requests, index, true))
        .collect();
    let mut results = HashMap::new();
    while let Some((index, result, took)) = running.next().await {
        results.insert(index, (result, took));
    }
    let mut chosen: Option<(usize, UpstreamResponse)> = None;
    let mut failures = Vec::new();
    let mut answers = Vec::new();
    for &index in &order {
        let Some((result, took)) = results.remove(&index) else {
            continue;
        };
        let candidate = &candidates[index];
        let (backend, model) = (candidate.backend.name(), candidate.model.as_str());
        let answer = match result {
            Ok(response) => {
                // It answered, so its request was there to send.
                let answer = match requests.get(index) {
                    Some(request) => {
                        Answer::decode(backend, model, request, &response.first_chunk, took)
                    }
                    None => Answer::failed(backend, model, "no request prepared".into(), took),
                };
                if chosen.is_none() {
                    chosen = Some((index, response));
                }
                answer
            }
            Err(failure) => {
                let answer = Answer::failed(backend, model, failure.to_string(), took);
                if chosen.is_none() {
                    failures.push(failure);
                }
                answer
            }
        };
        answers.push((index, answer));
    }
    let Some((index, response)) = chosen else {
        return Err(failures);
    };
    let chosen_answer = answers
        .iter()
        .find(|(i, _)| *i == index)
        .map(|(_, answer)| answer);
    let compared = answers
        .iter()
        .map(|(i, answer)| ComparedAnswer {
            answer: answer.summary.clone(),
            chosen: *i == index,
            agreement: chosen_answer
                .filter(|_| *i != index)
                .and_then(|chosen| answer.against(chosen)),
        })
        .collect();
    let record = FanOutRecord {
        mode: "all".to_owned(),
        fired: false,
        delay_ms: None,
        winner: candidates[index].backend.name().to_owned(),
        cancelled: Vec::new(),
        answers: compared,
    };
    Ok((
        Executed {
            index,
            response,
            failures,
        },
        record,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p95_waits_for_enough_samples_and_takes_the_nearest_rank() {
        let book = TtftBook::default();
        for ms in 1..=19 {
            book.add("local", Duration::from_millis(ms));
        }
        assert_eq!(book.p95("local", 20), None);
        book.add("local", Duration::from_millis(1000));
        // 20 samples: rank 19 is the p95, below the one slow outlier.
        assert_eq!(book.p95("local", 20), Some(Duration::from_millis(19)));
        assert_eq!(book.p95("other", 1), None);
    }

    #[test]
    fn the_ring_keeps_only_the_latest_samples() {
        let book = TtftBook::default();
        for _ in 0..TTFT_SAMPLES {
            book.add("local", Duration::from_secs(9));
        }
        for _ in 0..TTFT_SAMPLES {
            book.add("local", Duration::from_millis(5));
        }
        assert_eq!(book.p95("local", 1), Some(Duration::from_millis(5)));
    }
}
