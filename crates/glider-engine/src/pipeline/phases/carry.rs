//! Carry: every candidate is held to Glider's parameter rule (docs/translation.md, "The
//! rule") before anything is encoded. A candidate whose backend speaks another dialect
//! is asked [`glider_dialects::carry::verdict`]: parts it reads another way (an
//! Anthropic text document as text) are rewritten in its request; a parameter it
//! cannot honour (Chat Completions' `n` above 1 or `logprobs`, a PDF document) takes it
//! out of the candidates. A candidate of the client's own dialect gets the parameter
//! verbatim and answers for itself, unless it is a local server and the parameter is
//! one only the vendor's cloud serves (`carry::local_refusal`). With no candidate left the request fails with the
//! first candidate's 400, which names the parameter, in the caller's dialect — never a
//! 200 that quietly ignored it. Runs before the tool loop, which encodes on its own.

use glider_dialects::carry::verdict;

use super::{Flow, Job, Phase, PhaseFuture, not_routed, ready};

pub(crate) struct Carry;

impl Phase for Carry {
    fn name(&self) -> &'static str {
        "carry"
    }

    fn run<'a>(&'a self, job: &'a mut Job) -> PhaseFuture<'a> {
        let Some(decision) = &mut job.decision else {
            return ready(Flow::Fail(not_routed()));
        };
        let mut refused = None;
        let mut keep = Vec::with_capacity(decision.candidates.len());
        for (at, candidate) in decision.candidates.iter().enumerate() {
            let dialect = candidate.backend.dialect_for(job.front);
            // The client's own fields are judged on its request as it came: fitting
            // takes a local candidate's unsupported fields out of its copy, which
            // would hide them here. Parts are carried in the candidate's copy.
            let asked = job.adapted.get(at).and_then(Option::as_ref);
            let local = candidate.backend.is_local();
            match verdict(&job.request, asked, dialect, job.front, local) {
                Ok(None) => keep.push(true),
                Ok(Some(lowered)) => {
                    if job.adapted.len() <= at {
                        job.adapted.resize(at + 1, None);
                    }
                    job.adapted[at] = Some(lowered);
                    keep.push(true);
                }
                Err(error) => {
                    tracing::debug!(
                        backend = candidate.backend.name(),
                        error = %error.message,
                        "candidate cannot carry the request"
                    );
                    refused.get_or_insert(error);
                    keep.push(false);
                }
            }
        }
        let Some(refused) = refused else {
            return ready(Flow::Continue);
        };
        if !keep.contains(&true) {
            return ready(Flow::Fail(refused));
        }
        // Drop the refused candidates and what earlier phases left for them (same order).
        if let Some(reserve) = decision.local_reserve {
            let dropped_before = keep[..reserve.min(keep.len())]
                .iter()
                .filter(|kept| !**kept)
                .count();
            decision.local_reserve = Some(reserve - dropped_before);
        }
        keep_marked(&mut decision.candidates, &keep);
        keep_marked(&mut job.adapted, &keep);
        keep_marked(&mut job.endings, &keep);
        ready(Flow::Continue)
    }
}

/// Keep the items of `items` whose mark in `keep` is `true` (an item past the marks is
/// kept: the per-candidate lists may be shorter than the candidates).
fn keep_marked<T>(items: &mut Vec<T>, keep: &[bool]) {
    let mut marks = keep.iter();
    items.retain(|_| marks.next().copied().unwrap_or(true));
}
