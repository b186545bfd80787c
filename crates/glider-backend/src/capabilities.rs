//! What a local backend's models can do, as the server itself says: read on each health
//! probe (Ollama `/api/show` and `/api/ps`; llama.cpp `/props` and the `meta` of its
//! `/v1/models`; vLLM's `max_model_len` in `/v1/models`), kept on the backend's
//! [`Health`](crate::Health), and filled in under the configured model spec: a value the
//! config sets always wins ([`Backend::effective_spec`]). A llama.cpp server also counts
//! tokens exactly with the model's own tokenizer ([`Backend::count_chat_tokens`]).

use glider_config::ModelSpec;
use serde::Serialize;
use serde_json::Value;

use crate::client::Backend;

/// What one model can do, as its server reports it (`None`: the server did not say).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Capabilities {
    /// The context the server runs the model with, in tokens (llama.cpp `n_ctx`, vLLM
    /// `max_model_len`, Ollama's allocated `context_length` or the Modelfile `num_ctx`).
    pub context_window: Option<u64>,
    /// The context the model was trained for (llama.cpp `n_ctx_train`, Ollama's
    /// `model_info` context length): shown only; the server's own window is the limit.
    pub trained_context: Option<u64>,
    pub tools: Option<bool>,
    pub thinking: Option<bool>,
    pub vision: Option<bool>,
    /// The endpoints these were read from, e.g. `["/props", "/v1/models"]`.
    pub sources: Vec<String>,
}

impl Capabilities {
    /// Whether the server said anything at all.
    pub fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }

    /// `self`, with what it does not say taken from `other`.
    pub(crate) fn or(mut self, other: Capabilities) -> Capabilities {
        self.context_window = self.context_window.or(other.context_window);
        self.trained_context = self.trained_context.or(other.trained_context);
        self.tools = self.tools.or(other.tools);
        self.thinking = self.thinking.or(other.thinking);
        self.vision = self.vision.or(other.vision);
        for source in other.sources {
            if !self.sources.contains(&source) {
                self.sources.push(source);
            }
        }
        self
    }
}

/// Ollama's `POST /api/show` answer: `capabilities` lists what the model does
/// (`completion`, `tools`, `thinking`, `vision`, ...); `model_info` holds the trained
/// context as `<architecture>.context_length`; `parameters` (Modelfile lines) may set
/// `num_ctx`, the window Ollama loads the model with.
pub fn from_ollama_show(show: &Value) -> Capabilities {
    let listed: Option<Vec<&str>> = show["capabilities"]
        .as_array()
        .map(|c| c.iter().filter_map(Value::as_str).collect());
    let has = |name: &str| listed.as_ref().map(|l| l.contains(&name));
    let info = &show["model_info"];
    let trained_context = info["general.architecture"]
        .as_str()
        .and_then(|arch| info[format!("{arch}.context_length")].as_u64());
    let num_ctx = show["parameters"].as_str().and_then(|parameters| {
        parameters.lines().find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("num_ctx"))
                .then(|| words.next()?.parse().ok())
                .flatten()
        })
    });
    Capabilities {
        context_window: num_ctx,
        trained_context,
        tools: has("tools"),
        thinking: has("thinking"),
        vision: has("vision"),
        sources: vec!["/api/show".into()],
    }
}

/// An entry of Ollama's `GET /api/ps` (a loaded model): `context_length` is the window
/// it was loaded with, which is what a request must fit in now.
pub fn from_ollama_ps(entry: &Value) -> Capabilities {
    Capabilities {
        context_window: entry["context_length"].as_u64(),
        sources: vec!["/api/ps".into()],
        ..Capabilities::default()
    }
}

/// llama.cpp's `GET /props`: `default_generation_settings.n_ctx` (the context of one
/// slot), `chat_template_caps.supports_tools` (the template renders tools; read only
/// with `--jinja`), `modalities.vision`. Thinking is not stated there and stays unset.
pub fn from_llama_props(props: &Value) -> Capabilities {
    Capabilities {
        context_window: props["default_generation_settings"]["n_ctx"].as_u64(),
        tools: props["chat_template_caps"]["supports_tools"].as_bool(),
        vision: props["modalities"]["vision"].as_bool(),
        sources: vec!["/props".into()],
        ..Capabilities::default()
    }
}

/// One entry of an OpenAI-compatible `GET /v1/models`: vLLM adds `max_model_len`,
/// llama.cpp a `meta` with `n_ctx` and `n_ctx_train`. Empty for a plain OpenAI entry.
pub fn from_openai_model(entry: &Value) -> Capabilities {
    let context_window = entry["max_model_len"]
        .as_u64()
        .or(entry["meta"]["n_ctx"].as_u64());
    let trained_context = entry["meta"]["n_ctx_train"].as_u64();
    if context_window.is_none() && trained_context.is_none() {
        return Capabilities::default();
    }
    Capabilities {
        context_window,
        trained_context,
        sources: vec!["/v1/models".into()],
        ..Capabilities::default()
    }
}

/// One line a person reads: `context 4096 (trained 32768), tools yes, vision no (from
/// /props, /v1/models)`; what the server did not say is left out.
pub fn describe(caps: &Capabilities) -> String {
    let yes_no = |v: bool| if v { "yes" } else { "no" };
    let mut said = Vec::new();
    if let Some(window) = caps.context_window {
        said.push(format!("context {window}"));
    }
    if let Some(trained) = caps.trained_context {
        said.push(format!("trained context {trained}"));
    }
    for (name, value) in [
        ("tools", caps.tools),
        ("thinking", caps.thinking),
        ("vision", caps.vision),
    ] {
        if let Some(value) = value {
            said.push(format!("{name} {}", yes_no(value)));
        }
    }
    format!("{} (from {})", said.join(", "), caps.sources.join(", "))
}

impl Backend {
    /// What the server said `model` can do. A server listing exactly one model (a
    /// llama.cpp or vLLM server runs one) answers any name with it, so its entry is
    /// the model's whatever name the config gives it; Ollama's `:latest` tag is implied.
    pub fn discovered(&self, model: &str) -> Option<Capabilities> {
        let health = self.health();
        let found = health
            .capabilities
            .get(model)
            .or_else(|| health.capabilities.get(&format!("{model}:latest")))
            .or_else(|| {
                let single = health.served_models.len() == 1 && health.capabilities.len() == 1;
                (single && self.kind() != glider_config::BackendKind::Ollama)
                    .then(|| health.capabilities.values().next())
                    .flatten()
            });
        found.filter(|c| !c.is_empty()).cloned()
    }

    /// The model's spec as the config gives it, with what it leaves unset filled in
    /// from what the server said ([`Backend::discovered`]); `None` when neither knows
    /// the model.
    pub fn effective_spec(&self, model: &str) -> Option<ModelSpec> {
        let configured = self.config.model_spec(model);
        let Some(found) = self.discovered(model) else {
            return configured;
        };
        let mut spec = configured.unwrap_or_else(|| ModelSpec {
            name: model.to_owned(),
            context_window: None,
            thinking: None,
            tools: None,
            vision: None,
            max_output_tokens: None,
        });
        spec.thinking = spec.thinking.or(found.thinking);
        spec.tools = spec.tools.or(found.tools);
        spec.vision = spec.vision.or(found.vision);
        Some(spec)
    }

    /// Whether this is a llama.cpp server (it answered `/props`), whose `/tokenize`
    /// counts with the model's own tokenizer.
    pub fn has_tokenizer(&self) -> bool {
        self.kind() == glider_config::BackendKind::Vllm
            && self
                .health()
                .capabilities
                .values()
                .any(|c| c.sources.iter().any(|s| s == "/props"))
    }

    /// The exact input tokens of a Chat Completions body on a llama.cpp server: the
    /// prompt its chat template makes of the body (`POST /apply-template`, tools
    /// included), counted by its tokenizer (`POST /tokenize`, special tokens parsed as
    /// the server does for a completion).
    pub async fn count_chat_tokens(&self, chat: &Value) -> Result<u64, String> {
        let post = |path: &'static str, body: Value| async move {
            let response = self
                .at_root(reqwest::Method::POST, path)
                .json(&body)
                .timeout(self.config.first_byte_timeout())
                .send()
                .await
                .map_err(|e| format!("{} unreachable: {e}", self.root_url(path)))?;
            let status = response.status();
            let text = response.bytes().await.map_err(|e| e.to_string())?;
            if !status.is_success() {
                return Err(format!(
                    "{} answered HTTP {status}: {}",
                    self.root_url(path),
                    crate::client::snippet(&text)
                ));
            }
            serde_json::from_slice::<Value>(&text)
                .map_err(|e| format!("{} answered non-JSON: {e}", self.root_url(path)))
        };
        let applied = post("/apply-template", chat.clone()).await?;
        let prompt = applied["prompt"]
            .as_str()
            .ok_or("/apply-template answered without a prompt")?;
        let tokens = post(
            "/tokenize",
            serde_json::json!({"content": prompt, "add_special": true, "parse_special": true}),
        )
        .await?;
        tokens["tokens"]
            .as_array()
            .map(|t| t.len() as u64)
            .ok_or_else(|| "/tokenize answered without tokens".to_owned())
    }

    /// The context window of `model`: configured (the model's, then the backend's),
    /// else what the server runs it with.
    pub fn effective_context_window(&self, model: &str) -> Option<u64> {
        self.config
            .context_window_of(model)
            .or_else(|| self.discovered(model)?.context_window)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn ollama_show_names_tools_thinking_vision_and_the_modelfile_window() {
        let show = json!({
            "modelfile": "FROM qwen3:8b",
            "parameters": "temperature 0.6\nnum_ctx 16384\nstop \"<|im_end|>\"",
            "template": "{{ .Prompt }}",
            "details": {"format": "gguf", "family": "qwen3"},
            "model_info": {"general.architecture": "qwen3", "qwen3.context_length": 40960},
            "capabilities": ["completion", "tools", "thinking"],
        });
        assert_eq!(
            from_ollama_show(&show),
            Capabilities {
                context_window: Some(16384),
                trained_context: Some(40960),
                tools: Some(true),
                thinking: Some(true),
                vision: Some(false),
                sources: vec!["/api/show".into()],
            }
        );
        // An older Ollama without `capabilities` says nothing about them.
        let old = from_ollama_show(&json!({"model_info": {}}));
        assert_eq!(
            (old.tools, old.thinking, old.context_window),
            (None, None, None)
        );
    }

    #[test]
    fn llama_props_and_models_meta_give_the_window_template_caps_and_modalities() {
        let props = json!({
            "default_generation_settings": {"n_ctx": 4096, "params": {}},
            "modalities": {"vision": false, "audio": false},
            "chat_template_caps": {"supports_tools": true, "supports_system_role": true},
            "chat_template": "{{ messages }}",
        });
        let models = json!({"id": "gemma3-270m", "object": "model",
            "meta": {"n_ctx": 4096, "n_ctx_train": 32768, "n_vocab": 262144}});
        let merged = from_llama_props(&props).or(from_openai_model(&models));
        assert_eq!(
            merged,
            Capabilities {
                context_window: Some(4096),
                trained_context: Some(32768),
                tools: Some(true),
                thinking: None,
                vision: Some(false),
                sources: vec!["/props".into(), "/v1/models".into()],
            }
        );
    }

    #[test]
    fn vllm_models_give_max_model_len_and_a_plain_entry_gives_nothing() {
        let vllm =
            json!({"id": "Qwen/Qwen2.5-7B-Instruct", "object": "model", "max_model_len": 32768});
        assert_eq!(from_openai_model(&vllm).context_window, Some(32768));
        assert!(from_openai_model(&json!({"id": "gpt-4o", "object": "model"})).is_empty());
        assert_eq!(
            describe(&from_openai_model(&vllm)),
            "context 32768 (from /v1/models)"
        );
    }
}
