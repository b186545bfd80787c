//! The `pricing:` section: cloud list prices per model id or prefix, in USD per million
//! tokens, from which the dashboard works out what a request answered locally would
//! have cost at the model the client asked for. Glider starts from a built-in table of
//! the public list prices of the models its default profile names (docs/dashboard.md
//! cites them, with the date); the config's entries replace or add to it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// USD per million tokens of one model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    /// Fresh input tokens (cache writes are priced at this rate too).
    pub input: f64,
    pub output: f64,
    /// Input read from the vendor's prompt cache; the input price when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<f64>,
}

impl ModelPrice {
    const fn new(input: f64, output: f64, cache_read: f64) -> ModelPrice {
        ModelPrice {
            input,
            output,
            cache_read: Some(cache_read),
        }
    }

    /// What these tokens cost at this price, in USD.
    pub fn cost_usd(&self, input: u64, cache_read: u64, output: u64) -> f64 {
        let per_token = |tokens: u64, usd_per_million: f64| tokens as f64 * usd_per_million / 1e6;
        per_token(input, self.input)
            + per_token(cache_read, self.cache_read.unwrap_or(self.input))
            + per_token(output, self.output)
    }
}

/// Public list prices (standard tier, prompts up to 200k tokens) of the cloud models
/// the default profile's backends serve, as read from the vendors' pricing pages on
/// 2026-12-01 (docs/dashboard.md lists them with their sources). A key is a model id
/// or a prefix of one; the longest key that starts a model id prices it.
pub const BUILTIN_PRICES: &[(&str, ModelPrice)] = &[
    // Anthropic: platform.claude.com/docs/en/about-claude/pricing
    ("claude-opus-4-5", ModelPrice::new(5.0, 25.0, 0.50)),
    ("claude-opus-4", ModelPrice::new(15.0, 75.0, 1.50)),
    ("claude-sonnet-4", ModelPrice::new(3.0, 15.0, 0.30)),
    ("claude-3-7-sonnet", ModelPrice::new(3.0, 15.0, 0.30)),
    ("claude-haiku-4-5", ModelPrice::new(1.0, 5.0, 0.10)),
    ("claude-3-5-haiku", ModelPrice::new(0.80, 4.0, 0.08)),
    ("claude-3-haiku", ModelPrice::new(0.25, 1.25, 0.03)),
    // OpenAI: openai.com/api/pricing
    ("gpt-5", ModelPrice::new(1.25, 10.0, 0.125)),
    ("gpt-5-mini", ModelPrice::new(0.25, 2.0, 0.025)),
    ("gpt-5-nano", ModelPrice::new(0.05, 0.40, 0.005)),
    ("gpt-4.1", ModelPrice::new(2.0, 8.0, 0.50)),
    ("gpt-4.1-mini", ModelPrice::new(0.40, 1.60, 0.10)),
    ("gpt-4.1-nano", ModelPrice::new(0.10, 0.40, 0.025)),
    ("gpt-4o", ModelPrice::new(2.50, 10.0, 1.25)),
    ("gpt-4o-mini", ModelPrice::new(0.15, 0.60, 0.075)),
    ("o1", ModelPrice::new(15.0, 60.0, 7.50)),
    ("o3", ModelPrice::new(2.0, 8.0, 0.50)),
    ("o3-mini", ModelPrice::new(1.10, 4.40, 0.55)),
    ("o4-mini", ModelPrice::new(1.10, 4.40, 0.275)),
    ("codex-mini", ModelPrice::new(1.50, 6.0, 0.375)),
];

/// The price table (hot).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PricingConfig {
    /// Start from [`BUILTIN_PRICES`]; `false`: only `models` are priced.
    pub builtin: bool,
    /// Model id or prefix → price. A key here replaces the built-in key of the same
    /// name; the longest key that starts the model id wins.
    pub models: BTreeMap<String, ModelPrice>,
}

impl Default for PricingConfig {
    fn default() -> Self {
        PricingConfig {
            builtin: true,
            models: BTreeMap::new(),
        }
    }
}

impl PricingConfig {
    /// The price of `model` and the key that matched it: the longest key (configured
    /// or built in) that `model` starts with; `None` when no key does.
    pub fn price_of<'a>(&'a self, model: &str) -> Option<(&'a str, ModelPrice)> {
        let builtin = BUILTIN_PRICES
            .iter()
            .filter(|_| self.builtin)
            .filter(|(key, _)| !self.models.contains_key(*key))
            .map(|(key, price)| (*key, *price));
        let configured = self
            .models
            .iter()
            .map(|(key, price)| (key.as_str(), *price));
        configured
            .chain(builtin)
            .filter(|(key, _)| model.starts_with(key))
            .max_by_key(|(key, _)| key.len())
    }

    /// What is wrong with the configured prices.
    pub(crate) fn problems(&self, problems: &mut Vec<String>) {
        for (key, price) in &self.models {
            if key.trim().is_empty() {
                problems.push("pricing.models: a model id or prefix must not be empty".into());
            }
            let rates = [
                ("input", Some(price.input)),
                ("output", Some(price.output)),
                ("cache_read", price.cache_read),
            ];
            for (name, rate) in rates {
                if let Some(rate) = rate
                    && !(rate.is_finite() && rate >= 0.0)
                {
                    problems.push(format!(
                        "pricing.models.{key}.{name}: {rate} is not a price (USD per million tokens, 0 or more)"
                    ));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<crate::Config, crate::ConfigError> {
        crate::Config::parse(yaml, "test")
    }

    #[test]
    fn the_longest_matching_prefix_prices_a_model() {
        let pricing = PricingConfig::default();
        let key = |model: &str| pricing.price_of(model).map(|(key, _)| key);
        assert_eq!(key("claude-sonnet-4-5-20250929"), Some("claude-sonnet-4"));
        assert_eq!(key("claude-opus-4-5-20251101"), Some("claude-opus-4-5"));
        assert_eq!(key("claude-opus-4-1"), Some("claude-opus-4"));
        assert_eq!(key("gpt-4.1"), Some("gpt-4.1"));
        assert_eq!(key("gpt-4.1-mini-2025-04-14"), Some("gpt-4.1-mini"));
        assert_eq!(key("gpt-5-codex"), Some("gpt-5"));
        assert_eq!(key("qwen2.5-coder:7b"), None);
        let sonnet = pricing.price_of("claude-sonnet-4-5").expect("priced").1;
        // 1M fresh input, 1M cached input, 1M output.
        let cost = sonnet.cost_usd(1_000_000, 1_000_000, 1_000_000);
        assert!((cost - 18.30).abs() < 1e-9, "{cost}");
    }

    #[test]
    fn the_default_profile_models_are_priced() {
        let config = crate::Config::embedded_default().expect("default profile");
        for backend in config.backends.iter().filter(|b| !b.is_local()) {
            let model = backend.default_model.as_deref().expect("a default model");
            assert!(
                config.pricing.price_of(model).is_some(),
                "{model} of {} has no price",
                backend.name
            );
        }
    }

    #[test]
    fn configured_prices_replace_and_add_and_can_stand_alone() {
        let config = parse(
            "pricing:\n  models:\n    claude-sonnet-4: {input: 1, output: 2}\n    my-cloud-model: {input: 4, output: 8, cache_read: 0.4}\n",
        )
        .expect("valid");
        let (key, price) = config
            .pricing
            .price_of("claude-sonnet-4-5")
            .expect("priced");
        assert_eq!(
            (key, price.input, price.output),
            ("claude-sonnet-4", 1.0, 2.0)
        );
        assert_eq!(
            price.cost_usd(0, 1_000_000, 0),
            1.0,
            "cache read at the input rate"
        );
        assert!(config.pricing.price_of("my-cloud-model-v2").is_some());
        assert!(
            config.pricing.price_of("gpt-4.1").is_some(),
            "built-ins stay"
        );

        let alone = parse("pricing: {builtin: false, models: {mine: {input: 1, output: 1}}}\n")
            .expect("valid");
        assert!(alone.pricing.price_of("gpt-4.1").is_none());
        assert!(alone.pricing.price_of("mine").is_some());
    }

    #[test]
    fn a_price_that_is_not_one_is_refused() {
        let error = parse("pricing: {models: {x: {input: -1, output: 2}}}\n")
            .expect_err("negative")
            .to_string();
        assert!(error.contains("pricing.models.x.input"), "{error}");
        let error = parse("pricing: {models: {x: {input: 1}}}\n")
            .expect_err("output missing")
            .to_string();
        assert!(error.contains("output"), "{error}");
    }
}
