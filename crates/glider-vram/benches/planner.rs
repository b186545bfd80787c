//! The eviction planner's cost per decision: `cargo bench -p glider-vram --bench
//! planner`. Shapes from a small GPU (3 models) to the exhaustive search's limit (16
//! evictable) and past it (24, greedy); results go in bench/results/vram-planner-*.md.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use glider_vram::planner::{LoadedModel, Need, Room, plan};

fn loaded(count: usize) -> Vec<LoadedModel> {
    (0..count)
        .map(|i| LoadedModel {
            name: format!("model-{i}"),
            backend: "ollama".into(),
            memory_mib: 2000 + (i as u64 * 977) % 6000,
            reload_secs: 1.0 + (i as f64 * 1.7) % 9.0,
            in_use: i % 5 == 0,
            reserved: false,
            priority: 0,
            last_used_ms: i as u64,
        })
        .collect()
}

fn planner(c: &mut Criterion) {
    let need = Need {
        name: "wanted".into(),
        backend: "ollama".into(),
        memory_mib: 14_000,
        priority: 0,
    };
    let room = Room {
        free_mib: 1000,
        headroom_mib: 512,
        held_mib: 0,
        max_loaded: None,
    };
    let mut group = c.benchmark_group("plan");
    for count in [3usize, 8, 16, 24] {
        let models = loaded(count);
        group.bench_with_input(BenchmarkId::from_parameter(count), &models, |b, models| {
            b.iter(|| plan(std::hint::black_box(&need), models, &room))
        });
    }
    group.finish();
}

criterion_group!(benches, planner);
criterion_main!(benches);
