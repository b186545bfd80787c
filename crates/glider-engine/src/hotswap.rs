//! Hot swap (spec package `hotswap`): the registry of modules that accept a new config
//! (`backends`, `classifier`, `fan_out`, `runtime`, `plugins`, `mcp`). A reload hands the config to
//! each in the order they registered; each validates and builds its next state before
//! swapping it in, a request in flight keeps the snapshot it loaded (an `Arc`), and a
//! failed build keeps that module's current state and says why while the others swap.
//! A module whose part of the config did not change says so and keeps its version.
//! Every swap that took or failed is recorded ([`SwapRecord`]: module, version, time,
//! outcome) for `/api/hotswap`; so is a config file rejected before any module saw it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;
use glider_config::Config;
use serde::Serialize;

use crate::events::unix_ms;

/// How many swap records the registry keeps (the oldest go first).
const RECORDS_KEPT: usize = 200;

/// The module name under which a rejected config file is recorded.
pub const CONFIG_MODULE: &str = "config";

/// One reload of one module.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SwapRecord {
    pub module: &'static str,
    /// The module's version after this reload: it counts the swaps that took, from 1
    /// (the state it started with); a failed reload leaves it where it was.
    pub version: u64,
    pub at_ms: u64,
    /// Flattened: `"outcome": "ok"`, or `"outcome": "failed", "why": ...`.
    #[serde(flatten)]
    pub outcome: SwapOutcome,
}

/// Whether a reload swapped the module's state in.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum SwapOutcome {
    Ok,
    /// The module kept its previous state.
    Failed {
        why: String,
    },
}

/// What a reload did to a module that did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Swapped {
    /// Its next state was built and swapped in (its version goes up).
    New,
    /// Its part of the config did not change: nothing swapped, nothing recorded.
    Unchanged,
}

/// One module that accepts a new config.
pub trait HotSwap: Send + Sync {
    /// The module's name in logs and reload reports.
    fn name(&self) -> &'static str;

    /// Validate and build this module's next state from `config` and swap it in.
    /// `Err(why)`: the build failed and the module kept its current state.
    fn reload(&self, config: &Arc<Config>) -> Result<Swapped, String>;
}

/// A value readers snapshot and a reload replaces whole.
pub struct Swap<T> {
    current: ArcSwap<T>,
}

impl<T> Swap<T> {
    pub fn new(initial: T) -> Self {
        Swap {
            current: ArcSwap::from_pointee(initial),
        }
    }

    /// The current value; it stays valid for as long as the caller holds it, whatever
    /// reloads happen meanwhile.
    pub fn snapshot(&self) -> Arc<T> {
        self.current.load_full()
    }

    /// Build the next value from the current one and swap it in; on `Err` nothing is
    /// swapped.
    pub fn swap_with(&self, build: impl FnOnce(&T) -> Result<T, String>) -> Result<(), String> {
        let next = build(&self.snapshot())?;
        self.current.store(Arc::new(next));
        Ok(())
    }
}

/// The modules a reload is handed to, in the order they registered.
#[derive(Default)]
pub struct Registry {
    modules: Mutex<Vec<Arc<dyn HotSwap>>>,
    history: Mutex<History>,
}

#[derive(Default)]
struct History {
    /// Each module's swaps that took (its version less one).
    swaps: HashMap<&'static str, u64>,
    records: VecDeque<SwapRecord>,
}

impl Registry {
    pub fn register(&self, module: Arc<dyn HotSwap>) {
        self.lock().push(module);
    }

    /// The registered modules' names.
    pub fn names(&self) -> Vec<&'static str> {
        self.lock().iter().map(|m| m.name()).collect()
    }

    /// Each registered module and its version now (1: the state it started with).
    pub fn versions(&self) -> Vec<(&'static str, u64)> {
        let history = self.history.lock().unwrap_or_else(PoisonError::into_inner);
        self.lock()
            .iter()
            .map(|m| {
                (
                    m.name(),
                    history.swaps.get(m.name()).copied().unwrap_or(0) + 1,
                )
            })
            .collect()
    }

    /// Hand `config` to every module in turn (a later one may read what an earlier one
    /// kept); returns the modules that kept their previous state, with why.
    pub fn reload(&self, config: &Arc<Config>) -> Vec<(&'static str, String)> {
        // Reload outside the lock: a module's build may take a while.
        let modules = self.lock().clone();
        modules
            .iter()
            .filter_map(|m| match m.reload(config) {
                Ok(Swapped::Unchanged) => None,
                Ok(Swapped::New) => {
                    self.record(m.name(), Ok(()));
                    None
                }
                Err(why) => {
                    self.record(m.name(), Err(why.clone()));
                    Some((m.name(), why))
                }
            })
            .collect()
    }

    /// Record one reload of `module` (a registered one, or [`CONFIG_MODULE`]).
    pub fn record(&self, module: &'static str, outcome: Result<(), String>) {
        let mut history = self.history.lock().unwrap_or_else(PoisonError::into_inner);
        let swaps = history.swaps.entry(module).or_default();
        let outcome = match outcome {
            Ok(()) => {
                *swaps += 1;
                SwapOutcome::Ok
            }
            Err(why) => SwapOutcome::Failed { why },
        };
        let record = SwapRecord {
            module,
            version: *swaps + 1,
            at_ms: unix_ms(),
            outcome,
        };
        if history.records.len() == RECORDS_KEPT {
            history.records.pop_front();
        }
        history.records.push_back(record);
    }

    /// The swap records kept, oldest first.
    pub fn history(&self) -> Vec<SwapRecord> {
        let history = self.history.lock().unwrap_or_else(PoisonError::into_inner);
        history.records.iter().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<dyn HotSwap>>> {
        // A panic while registering leaves the list whole; keep using it.
        self.modules.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A module whose build fails when the config has no backends.
    struct Counter {
        value: Swap<usize>,
    }

    impl HotSwap for Counter {
        fn name(&self) -> &'static str {
            "counter"
        }

        fn reload(&self, config: &Arc<Config>) -> Result<Swapped, String> {
            if *self.value.snapshot() == config.backends.len() {
                return Ok(Swapped::Unchanged);
            }
            self.value.swap_with(|_| {
                if config.backends.is_empty() {
                    Err("no backends".into())
                } else {
                    Ok(config.backends.len())
                }
            })?;
            Ok(Swapped::New)
        }
    }

    #[test]
    fn a_failed_build_keeps_the_old_state_and_snapshots_outlive_a_swap() {
        let module = Arc::new(Counter {
            value: Swap::new(7),
        });
        let registry = Registry::default();
        registry.register(module.clone());
        assert_eq!(registry.names(), ["counter"]);

        let held = module.value.snapshot();
        let empty = Arc::new(Config::parse("backends: []\n", "t").expect("valid"));
        assert_eq!(
            registry.reload(&empty),
            [("counter", "no backends".to_owned())]
        );
        assert_eq!(*module.value.snapshot(), 7);
        let failed = &registry.history()[0];
        assert_eq!((failed.module, failed.version), ("counter", 1));
        assert_eq!(
            failed.outcome,
            SwapOutcome::Failed {
                why: "no backends".into()
            }
        );

        let one = Arc::new(
            Config::parse(
                "backends:\n  - {name: a, type: ollama, base_url: 'http://127.0.0.1:1', models: [m]}\n",
                "t",
            )
            .expect("valid"),
        );
        assert!(registry.reload(&one).is_empty());
        assert_eq!(*module.value.snapshot(), 1);
        assert_eq!(*held, 7, "a request in flight keeps its snapshot");
        let records = registry.history();
        assert_eq!(records.len(), 2);
        assert_eq!(
            (records[1].version, &records[1].outcome),
            (2, &SwapOutcome::Ok)
        );
        // The same again: nothing to swap, nothing recorded, the version stays.
        assert!(registry.reload(&one).is_empty());
        assert_eq!(registry.history().len(), 2);
        assert_eq!(registry.versions(), [("counter", 2)]);
    }
}
