//! The eviction plan, as a pure function: given the model a request needs, the memory
//! free, the headroom to keep, and the models loaded with their measured reload costs,
//! which set to unload so the model fits at the least summed reload cost — or why it
//! cannot fit. A model in use (a stream holds a reservation), one marked `reserve`, and
//! one of higher priority than the model needed are never chosen. The loaded models
//! may be on several backends sharing the GPU (an Ollama model and a vLLM model in
//! sleep mode); each is named with its backend, and `max_loaded` counts per backend.

use serde::Serialize;

/// A model loaded on the GPU, as the planner sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoadedModel {
    /// The name the plan gives it (`backend/model`).
    pub name: String,
    /// The backend it is loaded on (`max_loaded` counts per backend).
    pub backend: String,
    pub memory_mib: u64,
    /// Seconds to load it again if evicted (measured, or the unmeasured default).
    pub reload_secs: f64,
    /// A request or its stream holds a reservation on it.
    pub in_use: bool,
    /// `vram.models.<name>.reserve`.
    pub reserved: bool,
    pub priority: i32,
    /// Unix ms of its last request: the older of two equal plans is evicted.
    pub last_used_ms: u64,
}

/// The model a request needs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Need {
    pub name: String,
    pub backend: String,
    pub memory_mib: u64,
    pub priority: i32,
}

/// The memory around the plan.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Room {
    /// Free on the GPU now (loaded models already counted as used).
    pub free_mib: u64,
    /// Kept free beyond what the models take (`vram.headroom_mib`).
    pub headroom_mib: u64,
    /// Held for reserved models that are not loaded (`strategy: pinned`).
    pub held_mib: u64,
    /// The most models loaded at once on the needed model's backend (`vram.max_loaded`).
    pub max_loaded: Option<usize>,
}

/// What the planner decided.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "plan", rename_all = "snake_case")]
pub enum Plan {
    /// Already loaded: nothing to do.
    Loaded,
    /// It fits as things are.
    Fits,
    /// Unload these first; reloading them later costs `reload_cost_secs` in all.
    Evict {
        victims: Vec<String>,
        frees_mib: u64,
        reload_cost_secs: f64,
    },
    /// It cannot fit without evicting what must stay.
    CannotFit { reason: String },
}

/// The evictable models searched exhaustively up to this many (2^16 sets); past it the
/// cheapest-per-MiB are taken greedily. A GPU rarely holds more than a handful.
const EXACT_UP_TO: usize = 16;

/// Plan room for `need` among `loaded`.
pub fn plan(need: &Need, loaded: &[LoadedModel], room: &Room) -> Plan {
    if loaded.iter().any(|m| m.name == need.name) {
        return Plan::Loaded;
    }
    let usable = room
        .free_mib
        .saturating_sub(room.headroom_mib)
        .saturating_sub(room.held_mib);
    let short_mib = need.memory_mib.saturating_sub(usable);
    // Loading one more must leave at most `max_loaded`.
    let on_backend = loaded.iter().filter(|m| m.backend == need.backend).count();
    let short_count = room
        .max_loaded
        .map_or(0, |max| (on_backend + 1).saturating_sub(max));
    if short_mib == 0 && short_count == 0 {
        return Plan::Fits;
    }
    let (evictable, kept): (Vec<&LoadedModel>, Vec<&LoadedModel>) = loaded
        .iter()
        .partition(|m| !m.in_use && !m.reserved && m.priority <= need.priority);
    let short = Short {
        mib: short_mib,
        count: short_count,
        backend: &need.backend,
    };
    let best = if evictable.len() <= EXACT_UP_TO {
        cheapest_exact(&evictable, &short)
    } else {
        cheapest_greedy(&evictable, &short)
    };
    match best {
        Some(chosen) => {
            let victims: Vec<&LoadedModel> = chosen.iter().map(|&i| evictable[i]).collect();
            Plan::Evict {
                frees_mib: victims.iter().map(|m| m.memory_mib).sum(),
                reload_cost_secs: victims.iter().map(|m| m.reload_secs).sum(),
                victims: victims.iter().map(|m| m.name.clone()).collect(),
            }
        }
        None => Plan::CannotFit {
            reason: cannot_fit_reason(need, usable, &evictable, &kept, &short),
        },
    }
}

/// What the plan must free: memory, and models on the needed model's backend.
struct Short<'a> {
    mib: u64,
    count: usize,
    backend: &'a str,
}

/// Whether unloading the models at `chosen` covers both shortfalls.
fn covers(models: &[&LoadedModel], chosen: &[usize], short: &Short) -> bool {
    chosen
        .iter()
        .filter(|&&i| models[i].backend == short.backend)
        .count()
        >= short.count
        && chosen.iter().map(|&i| models[i].memory_mib).sum::<u64>() >= short.mib
}

/// The order of two plans `(reload cost, models, latest use)`: least reload cost, then
/// fewest models, then the least recently used.
fn better(a: (f64, usize, u64), b: (f64, usize, u64)) -> bool {
    a.0.total_cmp(&b.0)
        .then(a.1.cmp(&b.1))
        .then(a.2.cmp(&b.2))
        .is_lt()
}

/// Every subset, the cheapest that covers: each set is a bit mask, its sums taken over
/// its bits (no allocation per set).
fn cheapest_exact(models: &[&LoadedModel], short: &Short) -> Option<Vec<usize>> {
    let same_backend: u32 = (0..models.len())
        .filter(|&i| models[i].backend == short.backend)
        .fold(0, |mask, i| mask | (1 << i));
    let mut best: Option<(u32, (f64, usize, u64))> = None;
    for mask in 1u32..(1u32 << models.len()) {
        let count = mask.count_ones() as usize;
        if ((mask & same_backend).count_ones() as usize) < short.count {
            continue;
        }
        let (mut memory, mut cost, mut last_used) = (0u64, 0f64, 0u64);
        let mut bits = mask;
        while bits != 0 {
            let model = models[bits.trailing_zeros() as usize];
            bits &= bits - 1;
            memory += model.memory_mib;
            cost += model.reload_secs;
            last_used = last_used.max(model.last_used_ms);
        }
        if memory < short.mib {
            continue;
        }
        let key = (cost, count, last_used);
        if best.is_none_or(|(_, best_key)| better(key, best_key)) {
            best = Some((mask, key));
        }
    }
    best.map(|(mask, _)| (0..models.len()).filter(|i| mask & (1 << i) != 0).collect())
}

/// Cheapest reload cost per MiB first, until both shortfalls are covered.
fn cheapest_greedy(models: &[&LoadedModel], short: &Short) -> Option<Vec<usize>> {
    let mut order: Vec<usize> = (0..models.len()).collect();
    let per_mib = |m: &LoadedModel| m.reload_secs / m.memory_mib.max(1) as f64;
    order.sort_by(|&a, &b| per_mib(models[a]).total_cmp(&per_mib(models[b])));
    let mut chosen = Vec::new();
    for i in order {
        if covers(models, &chosen, short) {
            break;
        }
        chosen.push(i);
    }
    covers(models, &chosen, short).then_some(chosen)
}

fn cannot_fit_reason(
    need: &Need,
    usable: u64,
    evictable: &[&LoadedModel],
    kept: &[&LoadedModel],
    short: &Short,
) -> String {
    let idle: u64 = evictable.iter().map(|m| m.memory_mib).sum();
    let why_kept: Vec<String> = kept
        .iter()
        .map(|m| {
            let why = if m.in_use {
                "in use"
            } else if m.reserved {
                "reserved"
            } else {
                "higher priority"
            };
            format!("{} ({why})", m.name)
        })
        .collect();
    let kept = if why_kept.is_empty() {
        String::new()
    } else {
        format!("; kept: {}", why_kept.join(", "))
    };
    let evictable_here = evictable
        .iter()
        .filter(|m| m.backend == short.backend)
        .count();
    if short.count > evictable_here {
        return format!(
            "{} would pass vram.max_loaded and only {evictable_here} model(s) loaded on {} may be evicted{kept}",
            need.name, short.backend
        );
    }
    format!(
        "{} needs {} MiB; {usable} MiB free after headroom, and evicting every idle model frees only {idle} MiB more{kept}",
        need.name, need.memory_mib
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(name: &str, memory_mib: u64, reload_secs: f64) -> LoadedModel {
        LoadedModel {
            name: name.into(),
            backend: "b".into(),
            memory_mib,
            reload_secs,
            in_use: false,
            reserved: false,
            priority: 0,
            last_used_ms: 0,
        }
    }

    fn need(memory_mib: u64) -> Need {
        Need {
            name: "wanted".into(),
            backend: "b".into(),
            memory_mib,
            priority: 0,
        }
    }

    fn room(free_mib: u64) -> Room {
        Room {
            free_mib,
            headroom_mib: 0,
            held_mib: 0,
            max_loaded: None,
        }
    }

    fn victims(plan: &Plan) -> Vec<&str> {
        match plan {
            Plan::Evict { victims, .. } => victims.iter().map(String::as_str).collect(),
            other => panic!("expected an eviction, got {other:?}"),
        }
    }

    #[test]
    fn the_planner_decides_as_the_table_says() {
        let busy = LoadedModel {
            in_use: true,
            ..model("busy", 8000, 1.0)
        };
        let reserved = LoadedModel {
            reserved: true,
            ..model("kept", 8000, 1.0)
        };
        let important = LoadedModel {
            priority: 5,
            ..model("important", 8000, 1.0)
        };
        struct Case {
            what: &'static str,
            need: u64,
            free: u64,
            headroom: u64,
            loaded: Vec<LoadedModel>,
            max_loaded: Option<usize>,
            want: Result<Vec<&'static str>, &'static str>,
        }
        let cases = [
            Case {
                what: "fits in what is free",
                need: 4000,
                free: 5000,
                headroom: 0,
                loaded: vec![model("a", 4000, 3.0)],
                max_loaded: None,
                want: Ok(vec![]),
            },
            Case {
                what: "the headroom makes it not fit; the one idle model goes",
                need: 4000,
                free: 5000,
                headroom: 2000,
                loaded: vec![model("a", 4000, 3.0)],
                max_loaded: None,
                want: Ok(vec!["a"]),
            },
            Case {
                what: "one large cheap model beats two small ones that cost more together",
                need: 8000,
                free: 0,
                headroom: 0,
                loaded: vec![
                    model("small1", 4000, 2.0),
                    model("small2", 4000, 2.0),
                    model("large", 9000, 3.0),
                ],
                max_loaded: None,
                want: Ok(vec!["large"]),
            },
            Case {
                what: "two cheap small models beat one costly large one",
                need: 8000,
                free: 0,
                headroom: 0,
                loaded: vec![
                    model("small1", 4000, 2.0),
                    model("small2", 4000, 2.0),
                    model("large", 9000, 30.0),
                ],
                max_loaded: None,
                want: Ok(vec!["small1", "small2"]),
            },
            Case {
                what: "a busy model is never evicted, even when cheapest",
                need: 8000,
                free: 0,
                headroom: 0,
                loaded: vec![busy.clone(), model("idle", 8000, 20.0)],
                max_loaded: None,
                want: Ok(vec!["idle"]),
            },
            Case {
                what: "only busy, reserved or more important models: cannot fit",
                need: 8000,
                free: 1000,
                headroom: 0,
                loaded: vec![busy.clone(), reserved.clone(), important.clone()],
                max_loaded: None,
                want: Err("busy (in use), kept (reserved), important (higher priority)"),
            },
            Case {
                what: "larger than the GPU with everything evicted",
                need: 30000,
                free: 1000,
                headroom: 0,
                loaded: vec![model("a", 8000, 1.0)],
                max_loaded: None,
                want: Err("frees only 8000 MiB more"),
            },
            Case {
                what: "max_loaded forces an eviction though memory suffices",
                need: 1000,
                free: 50000,
                headroom: 0,
                loaded: vec![model("a", 1000, 5.0), model("b", 1000, 1.0)],
                max_loaded: Some(2),
                want: Ok(vec!["b"]),
            },
            Case {
                what: "max_loaded with nothing evictable",
                need: 1000,
                free: 50000,
                headroom: 0,
                loaded: vec![busy.clone()],
                max_loaded: Some(1),
                want: Err("vram.max_loaded"),
            },
        ];
        for case in cases {
            let plan = plan(
                &need(case.need),
                &case.loaded,
                &Room {
                    free_mib: case.free,
                    headroom_mib: case.headroom,
                    held_mib: 0,
                    max_loaded: case.max_loaded,
                },
            );
            match (&case.want, &plan) {
                (Ok(want), Plan::Fits) if want.is_empty() => {}
                (Ok(want), Plan::Evict { .. }) => {
                    assert_eq!(&victims(&plan), want, "{}: {plan:?}", case.what)
                }
                (Err(want), Plan::CannotFit { reason }) => {
                    assert!(reason.contains(want), "{}: {reason}", case.what)
                }
                _ => panic!("{}: wanted {:?}, got {plan:?}", case.what, case.want),
            }
        }
    }

    #[test]
    fn a_loaded_model_needs_nothing_and_equal_plans_evict_the_least_recently_used() {
        let loaded = [model("wanted", 4000, 1.0)];
        assert_eq!(plan(&need(4000), &loaded, &room(0)), Plan::Loaded);
        let recent = LoadedModel {
            last_used_ms: 2000,
            ..model("recent", 4000, 2.0)
        };
        let old = LoadedModel {
            last_used_ms: 1000,
            ..model("old", 4000, 2.0)
        };
        let plan = plan(&need(4000), &[recent, old], &room(0));
        assert_eq!(victims(&plan), ["old"]);
    }

    #[test]
    fn memory_held_for_pinned_models_counts_as_taken() {
        let held = Room {
            held_mib: 6000,
            ..room(8000)
        };
        assert!(matches!(
            plan(&need(4000), &[], &held),
            Plan::CannotFit { .. }
        ));
        assert_eq!(plan(&need(2000), &[], &held), Plan::Fits);
    }

    #[test]
    fn a_model_on_another_backend_frees_memory_but_not_a_place_under_max_loaded() {
        let other = LoadedModel {
            backend: "vllm".into(),
            ..model("vllm/q", 8000, 0.2)
        };
        // Memory: the other backend's model is the cheapest to put aside (a wake).
        let plan_ = plan(
            &need(6000),
            &[model("b/a", 8000, 9.0), other.clone()],
            &room(0),
        );
        assert_eq!(victims(&plan_), ["vllm/q"]);
        // max_loaded 1 on backend b: only b's own model makes a place.
        let one = Room {
            max_loaded: Some(1),
            ..room(50_000)
        };
        let plan_ = plan(&need(1000), &[model("b/a", 8000, 9.0), other.clone()], &one);
        assert_eq!(victims(&plan_), ["b/a"]);
        let busy = LoadedModel {
            in_use: true,
            ..model("b/a", 8000, 9.0)
        };
        let Plan::CannotFit { reason } = plan(&need(1000), &[busy, other], &one) else {
            panic!("only a busy model holds backend b's one place");
        };
        assert!(reason.contains("0 model(s) loaded on b"), "{reason}");
    }

    #[test]
    fn many_evictable_models_are_planned_greedily_and_still_cover_the_need() {
        let loaded: Vec<LoadedModel> = (0..20)
            .map(|i| model(&format!("m{i}"), 1000, f64::from(i)))
            .collect();
        let plan = plan(&need(3500), &loaded, &room(0));
        assert_eq!(victims(&plan), ["m0", "m1", "m2", "m3"]);
    }
}
