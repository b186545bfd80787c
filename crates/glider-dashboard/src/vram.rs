//! The dashboard's view of GPU memory: `GET /api/vram` (the GPUs, each local model's
//! state and measured costs, the last eviction plan), the VRAM gauges on `/metrics`,
//! and the monitor's and planner's events forwarded to `/ws` as `type: "vram"`.
//! Without VRAM attached, or on a machine with no GPU, the endpoint says so.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;

use crate::Shared;
use crate::collector::broadcast_event;
use crate::ws::WsEvent;

/// `GET /api/vram`
pub async fn view(State(shared): State<Arc<Shared>>) -> Response {
    let Some(vram) = shared.engine.vram() else {
        return Json(
            json!({"enabled": false, "gpu": {"source": "none", "gpus": []}, "models": []}),
        )
        .into_response();
    };
    let runtime = shared.engine.runtime();
    Json(vram.view(&runtime.config.vram, &runtime.backends)).into_response()
}

/// Forward VRAM events to `/ws` until the dashboard closes.
pub fn spawn_forward(shared: &Arc<Shared>) -> Option<tokio::task::JoinHandle<()>> {
    let mut events = shared.engine.vram()?.subscribe();
    let shared = shared.clone();
    let mut closing = shared.closing.subscribe();
    Some(tokio::spawn(async move {
        loop {
            tokio::select! {
                event = events.recv() => match event {
                    Ok(event) => broadcast_event(&shared, &WsEvent::Vram { event: &event }),
                    Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => return,
                },
                _ = closing.changed() => return,
            }
        }
    }))
}

/// An OpenMetrics label value.
pub(crate) fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The VRAM gauges, inserted before the closing `# EOF` of `text`.
pub fn with_gauges(mut text: String, shared: &Shared) -> String {
    let Some(vram) = shared.engine.vram() else {
        return text;
    };
    let runtime = shared.engine.runtime();
    let view = vram.view(&runtime.config.vram, &runtime.backends);
    let mut out = String::new();
    let mut family = |name: &str, help: &str, unit: Option<&str>, rows: Vec<(String, String)>| {
        let _ = writeln!(out, "# TYPE {name} gauge");
        if let Some(unit) = unit {
            let _ = writeln!(out, "# UNIT {name} {unit}");
        }
        let _ = writeln!(out, "# HELP {name} {help}");
        for (labels, value) in rows {
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    };
    let gpu = |g: &glider_vram::monitor::GpuSample| format!("gpu=\"{}\"", g.index);
    let gpus = &view.gpu.gpus;
    family(
        "glider_gpu_memory_total_mebibytes",
        "GPU memory, total.",
        Some("mebibytes"),
        gpus.iter()
            .map(|g| (gpu(g), g.total_mib.to_string()))
            .collect(),
    );
    family(
        "glider_gpu_memory_used_mebibytes",
        "GPU memory in use (every process).",
        Some("mebibytes"),
        gpus.iter()
            .map(|g| (gpu(g), g.used_mib.to_string()))
            .collect(),
    );
    family(
        "glider_gpu_utilization_percent",
        "GPU busy percent over the last sample period.",
        None,
        gpus.iter()
            .filter_map(|g| Some((gpu(g), g.utilization_pct?.to_string())))
            .collect(),
    );
    let model = |m: &glider_vram::ModelView| {
        format!(
            "backend=\"{}\",model=\"{}\"",
            label(&m.backend),
            label(&m.model)
        )
    };
    family(
        "glider_vram_model_loaded",
        "1 while a local model is loaded.",
        None,
        view.models
            .iter()
            .map(|m| (model(m), u8::from(m.loaded).to_string()))
            .collect(),
    );
    family(
        "glider_vram_model_memory_mebibytes",
        "A local model's measured memory when loaded.",
        Some("mebibytes"),
        view.models
            .iter()
            .filter_map(|m| Some((model(m), m.memory_mib?.to_string())))
            .collect(),
    );
    family(
        "glider_vram_model_load_seconds",
        "A local model's last measured load time.",
        Some("seconds"),
        view.models
            .iter()
            .filter_map(|m| Some((model(m), m.load_secs?.to_string())))
            .collect(),
    );
    family(
        "glider_vram_model_wake_seconds",
        "A vLLM model's last measured wake from sleep mode.",
        Some("seconds"),
        view.models
            .iter()
            .filter_map(|m| Some((model(m), m.wake_secs?.to_string())))
            .collect(),
    );
    family(
        "glider_vram_model_in_flight",
        "Requests and streams holding a local model now.",
        None,
        view.models
            .iter()
            .map(|m| (model(m), m.in_flight.to_string()))
            .collect(),
    );
    before_eof(&mut text, &out);
    text
}

/// `families` inserted before the closing `# EOF` of the OpenMetrics `text`.
pub(crate) fn before_eof(text: &mut String, families: &str) {
    match text.rfind("# EOF") {
        Some(at) => text.insert_str(at, families),
        None => text.push_str(families),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use glider_vram::{GpuState, VramEvent};

    #[test]
    fn a_vram_event_on_ws_is_its_own_fields_under_type_vram() {
        let unloaded = VramEvent::Unloaded {
            backend: "local".into(),
            model: "big".into(),
        };
        assert_eq!(
            serde_json::to_value(WsEvent::Vram { event: &unloaded }).expect("json"),
            json!({"type": "vram", "event": "unloaded", "backend": "local", "model": "big"})
        );
        let sample = VramEvent::Sample(GpuState {
            source: "nvidia-smi",
            sampled_at_ms: 7,
            ..GpuState::default()
        });
        assert_eq!(
            serde_json::to_value(WsEvent::Vram { event: &sample }).expect("json"),
            json!({"type": "vram", "event": "sample", "source": "nvidia-smi", "detected": "",
                   "gpus": [], "error": null, "sampled_at_ms": 7})
        );
    }
}
