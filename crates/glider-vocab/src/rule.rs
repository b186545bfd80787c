//! [`RuleName`] names every rule a routing decision or an opinion can cite, with the
//! strings the wire carries (`x-glider-route`, the request history, `/ws`, `/api`, the
//! context log). The rules themselves are the engine's router.

use serde::{Serialize, Serializer};

/// Every rule a decision or an opinion can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RuleName {
    Explicit,
    Sticky,
    Classifier,
    Starlark,
    /// A plugin's routing opinion (docs/plugins.md).
    Plugin,
    /// No rule had an opinion: the backends that list the model.
    Model,
    /// A local model could not hold the request, so the cloud took it.
    TokenLimit,
    /// MITM: no backend serves the model; the CLI's origin does.
    Origin,
    /// The cloud could not be reached, so a local model answered (`routing.local_fallback`).
    LocalFallback,
}

impl RuleName {
    /// Every rule.
    pub const ALL: [RuleName; 9] = [
        RuleName::Explicit,
        RuleName::Sticky,
        RuleName::Classifier,
        RuleName::Starlark,
        RuleName::Plugin,
        RuleName::Model,
        RuleName::TokenLimit,
        RuleName::Origin,
        RuleName::LocalFallback,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RuleName::Explicit => "explicit",
            RuleName::Sticky => "sticky",
            RuleName::Classifier => "classifier",
            RuleName::Starlark => "starlark",
            RuleName::Plugin => "plugin",
            RuleName::Model => "model",
            RuleName::TokenLimit => "token_limit",
            RuleName::Origin => "origin",
            RuleName::LocalFallback => "local_fallback",
        }
    }
}

impl std::fmt::Display for RuleName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl Serialize for RuleName {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl PartialEq<&str> for RuleName {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}
