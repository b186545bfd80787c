//! User routing rules in Starlark (the router's last rule: after explicit, sticky, the
//! classifier and a plugin's opinion). A `.star` file defines
//! `route(req)`; it is parsed, evaluated and frozen once, then called per request on a
//! temporary heap with a copy of the request view and a bounded number of steps. Kept in
//! its own crate because starlark is the slowest dependency to compile.

use starlark::environment::{FrozenModule, Globals, GlobalsBuilder, LibraryExtension, Module};
use starlark::eval::Evaluator;
use starlark::syntax::{AstModule, Dialect};
use starlark::values::Value;

/// Steps (function calls and loop iterations) one `route` call may take.
pub const DEFAULT_MAX_STEPS: u64 = 100_000;

/// A compiled, frozen rules file.
pub struct Rules {
    name: String,
    module: FrozenModule,
}

impl std::fmt::Debug for Rules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rules")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

fn globals() -> Globals {
    GlobalsBuilder::extended_by(&[
        LibraryExtension::Json,
        LibraryExtension::Print,
        LibraryExtension::StructType,
    ])
    .build()
}

fn message(e: impl std::fmt::Display) -> String {
    e.to_string()
}

impl Rules {
    /// Parse and evaluate `source` (named `name` in messages) and freeze it. The file
    /// must define a function `route`.
    pub fn compile(name: &str, source: &str) -> Result<Rules, String> {
        let ast = AstModule::parse(name, source.to_owned(), &Dialect::Extended).map_err(message)?;
        let module = Module::with_temp_heap(|module| -> Result<FrozenModule, String> {
            {
                let mut eval = Evaluator::new(&module);
                eval.set_max_tick_count(DEFAULT_MAX_STEPS * 10)
                    .map_err(message)?;
                eval.eval_module(ast, &globals()).map_err(message)?;
            }
            match module.get("route") {
                Some(value) if value.get_type() == "function" => {}
                Some(value) => {
                    return Err(format!(
                        "{name}: `route` must be a function, it is a {}",
                        value.get_type()
                    ));
                }
                None => return Err(format!("{name}: no `route(req)` function defined")),
            }
            module
                .freeze()
                .map_err(|e| format!("{name}: {}", e.err_msg))
        })?;
        Ok(Rules {
            name: name.to_owned(),
            module,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Call `route(req)` with `request` (a JSON object, copied onto a temporary heap, so
    /// the script cannot change anything). `Ok(None)`: no opinion. An error — script
    /// failure, a wrong return type, or more than `max_steps` steps — is for the caller
    /// to log and fall through.
    pub fn route(
        &self,
        request: &serde_json::Value,
        max_steps: u64,
    ) -> Result<Option<String>, String> {
        let function = self.module.get("route").map_err(message)?;
        Module::with_temp_heap(|module| {
            let route = module.heap().access_owned_frozen_value(&function);
            let request = module.heap().alloc(request);
            let mut eval = Evaluator::new(&module);
            eval.set_max_tick_count(max_steps.max(1)).map_err(message)?;
            let result: Value = eval
                .eval_function(route, &[request], &[])
                .map_err(message)?;
            if result.is_none() {
                return Ok(None);
            }
            match result.unpack_str() {
                Some(target) => Ok(Some(target.to_owned())),
                None => Err(format!(
                    "{}: route() must return a string or None, it returned a {}",
                    self.name,
                    result.get_type()
                )),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const RULES: &str = r#"
def route(req):
    if req["model"].startswith("claude-3-5-haiku"):
        return "local"
    if req["tokens"] > 100000:
        return "cloud"
    if "/big" in req["last_user_text"]:
        return "claude"
    return None
"#;

    #[test]
    fn answers_from_the_request_view() {
        let rules = Rules::compile("rules.star", RULES).expect("compiles");
        let view = |model: &str, tokens: u64, text: &str| json!({"model": model, "tokens": tokens, "last_user_text": text});
        assert_eq!(
            rules.route(&view("claude-3-5-haiku-x", 10, ""), 1000),
            Ok(Some("local".into()))
        );
        assert_eq!(
            rules.route(&view("claude-opus", 200_000, ""), 1000),
            Ok(Some("cloud".into()))
        );
        assert_eq!(
            rules.route(&view("claude-opus", 10, "do /big"), 1000),
            Ok(Some("claude".into()))
        );
        assert_eq!(rules.route(&view("claude-opus", 10, "hi"), 1000), Ok(None));
    }

    #[test]
    fn compile_errors_name_the_problem() {
        let err = Rules::compile("bad.star", "def route(req):\n  return (\n").expect_err("syntax");
        assert!(err.contains("bad.star"), "{err}");
        let err = Rules::compile("none.star", "x = 1\n").expect_err("no route");
        assert!(err.contains("no `route(req)`"), "{err}");
        let err = Rules::compile("notfn.star", "route = 3\n").expect_err("not a function");
        assert!(err.contains("must be a function"), "{err}");
    }

    #[test]
    fn runaway_scripts_are_stopped() {
        let rules = Rules::compile(
            "loop.star",
            "def route(req):\n  for i in range(100000000):\n    pass\n  return 'local'\n",
        )
        .expect("compiles");
        let err = rules.route(&json!({}), 10_000).expect_err("bounded");
        assert!(err.contains("ticks"), "{err}");
    }

    #[test]
    fn runtime_errors_and_bad_returns_are_errors() {
        let rules = Rules::compile("e.star", "def route(req):\n  return req['missing']\n")
            .expect("compiles");
        assert!(rules.route(&json!({}), 1000).is_err());
        let rules = Rules::compile("t.star", "def route(req):\n  return 42\n").expect("compiles");
        let err = rules.route(&json!({}), 1000).expect_err("int");
        assert!(err.contains("string or None"), "{err}");
    }

    #[test]
    fn the_script_cannot_keep_state_between_calls() {
        let rules = Rules::compile(
            "s.star",
            "seen = []\ndef route(req):\n  seen.append(1)\n  return None\n",
        )
        .expect("compiles");
        // `seen` is frozen: appending is an error, not a leak between requests.
        assert!(rules.route(&json!({}), 1000).is_err());
    }
}
