//! The GPU monitor: memory and utilisation per device behind one [`Monitor`] trait,
//! read through NVML ([`NvmlMonitor`], NVIDIA's library loaded at run time, so a
//! machine without it still runs Glider) or by running `nvidia-smi`
//! ([`NvidiaSmiMonitor`]); [`detect`] picks what works, and a machine where neither
//! does gets [`NoGpu`]: an empty sample, never an error.
//!
//! `nvidia-smi` is a child process that can hang (a wedged driver) or print without end:
//! each run has a deadline ([`NVIDIA_SMI_TIMEOUT`]) and a byte cap on what is read
//! ([`NVIDIA_SMI_OUTPUT_CAP`]), runs in its own process group (killed whole on either,
//! and by [`Monitor::stop`] when Glider stops), and is never waited on by start-up.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use glider_sys::procutil::{Ending, LiveGroups, RunLimits, run_bounded};

use glider_config::MonitorKind;
use serde::Serialize;

/// One GPU as sampled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuSample {
    pub index: u32,
    pub total_mib: u64,
    pub used_mib: u64,
    /// Percent busy over the last sample period (`None`: the device does not say).
    pub utilization_pct: Option<u32>,
}

/// Reads the GPUs. Sampling may block (a subprocess, a driver call): call it off the
/// async runtime.
pub trait Monitor: Send + Sync {
    /// `nvml`, `nvidia-smi` or `none`.
    fn source(&self) -> &'static str;
    /// Every GPU now; empty when there is none.
    fn sample(&self) -> Result<Vec<GpuSample>, String>;
    /// Kill whatever a sample is running now and run nothing more (Glider is stopping).
    fn stop(&self) {}
}

/// No GPU: every VRAM rule steps aside.
pub struct NoGpu;

impl Monitor for NoGpu {
    fn source(&self) -> &'static str {
        "none"
    }
    fn sample(&self) -> Result<Vec<GpuSample>, String> {
        Ok(Vec::new())
    }
}

/// What NVML answers, per device: the seam a fake NVML stands in for in tests.
pub trait NvmlDevices: Send + Sync {
    fn count(&self) -> Result<u32, String>;
    /// (total, used) in bytes.
    fn memory(&self, index: u32) -> Result<(u64, u64), String>;
    /// GPU utilisation in percent; `Err` where the device does not report it.
    fn utilization(&self, index: u32) -> Result<u32, String>;
}

/// NVIDIA's own library, opened with `dlopen` by `nvml-wrapper`.
struct RealNvml(nvml_wrapper::Nvml);

impl NvmlDevices for RealNvml {
    fn count(&self) -> Result<u32, String> {
        self.0.device_count().map_err(|e| e.to_string())
    }
    fn memory(&self, index: u32) -> Result<(u64, u64), String> {
        let device = self.0.device_by_index(index).map_err(|e| e.to_string())?;
        let memory = device.memory_info().map_err(|e| e.to_string())?;
        Ok((memory.total, memory.used))
    }
    fn utilization(&self, index: u32) -> Result<u32, String> {
        let device = self.0.device_by_index(index).map_err(|e| e.to_string())?;
        device
            .utilization_rates()
            .map(|u| u.gpu)
            .map_err(|e| e.to_string())
    }
}

/// GPUs through NVML.
pub struct NvmlMonitor {
    devices: Box<dyn NvmlDevices>,
}

const MIB: u64 = 1024 * 1024;

impl NvmlMonitor {
    /// Load `libnvidia-ml`; an error where the library or the driver is missing.
    pub fn load() -> Result<NvmlMonitor, String> {
        let nvml = nvml_wrapper::Nvml::init().map_err(|e| format!("NVML: {e}"))?;
        Ok(NvmlMonitor::over(Box::new(RealNvml(nvml))))
    }

    /// A monitor over any NVML answers (a fake one in tests).
    pub fn over(devices: Box<dyn NvmlDevices>) -> NvmlMonitor {
        NvmlMonitor { devices }
    }
}

impl Monitor for NvmlMonitor {
    fn source(&self) -> &'static str {
        "nvml"
    }
    fn sample(&self) -> Result<Vec<GpuSample>, String> {
        (0..self.devices.count()?)
            .map(|index| {
                let (total, used) = self.devices.memory(index)?;
                Ok(GpuSample {
                    index,
                    total_mib: total / MIB,
                    used_mib: used / MIB,
                    utilization_pct: self.devices.utilization(index).ok(),
                })
            })
            .collect()
    }
}

/// The arguments Glider runs `nvidia-smi` with: one CSV line per GPU, in MiB and %.
pub const NVIDIA_SMI_ARGS: &[&str] = &[
    "--query-gpu=index,memory.total,memory.used,utilization.gpu",
    "--format=csv,noheader,nounits",
];

/// How long one `nvidia-smi` run may take before its process group is killed and the
/// sample is an error.
pub const NVIDIA_SMI_TIMEOUT: Duration = Duration::from_secs(10);

/// The most bytes of `nvidia-smi`'s standard output read per run (64 KiB: one line per
/// GPU is some 30 bytes); past it the read stops, the group is killed and the sample is
/// an error that says so. Its standard error is read up to [`NVIDIA_SMI_STDERR_CAP`].
pub const NVIDIA_SMI_OUTPUT_CAP: usize = 64 * 1024;

/// The most bytes of `nvidia-smi`'s standard error kept for an error message.
pub const NVIDIA_SMI_STDERR_CAP: usize = 4 * 1024;

/// GPUs by running `nvidia-smi`.
pub struct NvidiaSmiMonitor {
    program: PathBuf,
    limits: RunLimits,
    live: LiveGroups,
}

impl NvidiaSmiMonitor {
    /// `program` under the default deadline and caps, its runs in `live` (closed when
    /// Glider stops).
    pub fn new(program: impl Into<PathBuf>, live: LiveGroups) -> NvidiaSmiMonitor {
        NvidiaSmiMonitor::with_limits(
            program,
            RunLimits {
                timeout: NVIDIA_SMI_TIMEOUT,
                stdout_cap: NVIDIA_SMI_OUTPUT_CAP,
                stderr_cap: NVIDIA_SMI_STDERR_CAP,
            },
            live,
        )
    }

    /// `program` under other limits (a short deadline in tests).
    pub fn with_limits(
        program: impl Into<PathBuf>,
        limits: RunLimits,
        live: LiveGroups,
    ) -> NvidiaSmiMonitor {
        NvidiaSmiMonitor {
            program: program.into(),
            limits,
            live,
        }
    }
}

impl Monitor for NvidiaSmiMonitor {
    fn source(&self) -> &'static str {
        "nvidia-smi"
    }
    fn sample(&self) -> Result<Vec<GpuSample>, String> {
        let program = self.program.display();
        let mut command = Command::new(&self.program);
        command.args(NVIDIA_SMI_ARGS);
        let output = run_bounded(&mut command, self.limits, &self.live)
            .map_err(|e| format!("cannot run {program}: {e}"))?;
        match output.ending {
            Ending::Exited => {}
            Ending::Cut => {
                return Err(format!(
                    "{program} printed more than {} bytes: read stopped at the cap and the process killed",
                    self.limits.stdout_cap
                ));
            }
            Ending::TimedOut => {
                return Err(format!(
                    "{program} did not finish within {:?}: killed",
                    self.limits.timeout
                ));
            }
            Ending::Stopped => return Err(format!("{program} killed: Glider is stopping")),
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let said = [stdout.trim(), stderr.trim()]
                .into_iter()
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join("; ");
            return Err(format!("{program} exited with {}: {said}", output.status));
        }
        parse_nvidia_smi(&stdout)
    }

    fn stop(&self) {
        self.live.close();
    }
}

/// Parse `index, memory.total, memory.used, utilization.gpu` lines. Blank lines are
/// skipped; a field of `[N/A]` (or any other bracketed note) is unknown: a GPU without
/// its memory figures is left out, one without utilisation keeps `None`. Output with
/// lines but not one readable GPU is an error (the format changed under us).
pub fn parse_nvidia_smi(text: &str) -> Result<Vec<GpuSample>, String> {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let field = |raw: Option<&str>| -> Option<u64> { raw?.trim().parse().ok() };
    let gpus: Vec<GpuSample> = lines
        .iter()
        .filter_map(|line| {
            let mut fields = line.split(',');
            let index = field(fields.next())?;
            let total_mib = field(fields.next())?;
            let used_mib = field(fields.next())?;
            let utilization_pct = field(fields.next()).and_then(|u| u32::try_from(u).ok());
            Some(GpuSample {
                index: u32::try_from(index).ok()?,
                total_mib,
                used_mib,
                utilization_pct,
            })
        })
        .collect();
    if gpus.is_empty() && !lines.is_empty() {
        return Err(format!(
            "nvidia-smi printed no readable GPU line (first line: {:?})",
            lines[0]
        ));
    }
    Ok(gpus)
}

/// A GPU sample: every GPU, or why they could not be read.
pub type Sampled = Result<Vec<GpuSample>, String>;

/// The monitor `kind` asks for. `auto` tries NVML, then `nvidia-smi`, and settles for
/// [`NoGpu`] when neither finds a GPU; the second value says what was tried, the third
/// is the sample `auto` took to decide (`None` where it took none), so the GPUs are not
/// read twice at start. `nvidia-smi` runs in `live`. Blocking (NVML, a subprocess).
pub fn detect(
    kind: MonitorKind,
    nvidia_smi: &str,
    live: &LiveGroups,
) -> (Box<dyn Monitor>, String, Option<Sampled>) {
    let smi = || NvidiaSmiMonitor::new(nvidia_smi, live.clone());
    match kind {
        MonitorKind::None => (Box::new(NoGpu), "vram.monitor: none".into(), None),
        MonitorKind::Nvml => match NvmlMonitor::load() {
            Ok(nvml) => (Box::new(nvml), "NVML".into(), None),
            Err(e) => (Box::new(NoGpu), format!("no GPU: {e}"), None),
        },
        MonitorKind::NvidiaSmi => (Box::new(smi()), "nvidia-smi".into(), None),
        MonitorKind::Auto => {
            let nvml = NvmlMonitor::load();
            let nvml_said = match nvml {
                Ok(nvml) => match nvml.sample() {
                    Ok(gpus) if !gpus.is_empty() => {
                        return (Box::new(nvml), "NVML".into(), Some(Ok(gpus)));
                    }
                    Ok(_) => "NVML sees no GPU".to_owned(),
                    Err(e) => e,
                },
                Err(e) => e,
            };
            let smi = smi();
            match smi.sample() {
                Ok(gpus) if !gpus.is_empty() => (
                    Box::new(smi),
                    format!("nvidia-smi ({nvml_said})"),
                    Some(Ok(gpus)),
                ),
                Ok(_) => (
                    Box::new(NoGpu),
                    format!("no GPU ({nvml_said}; nvidia-smi lists none)"),
                    Some(Ok(Vec::new())),
                ),
                Err(e) => (
                    Box::new(NoGpu),
                    format!("no GPU ({nvml_said}; {e})"),
                    Some(Ok(Vec::new())),
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An executable `nvidia-smi` in `dir` running `body`.
    fn fake_smi(dir: &std::path::Path, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join("nvidia-smi");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        path
    }

    #[test]
    fn endless_nvidia_smi_output_is_read_up_to_the_cap_and_said_so() {
        let dir = tempfile::tempdir().expect("tempdir");
        let smi = fake_smi(dir.path(), "yes '0, 24576, 1024, 7'");
        let err = NvidiaSmiMonitor::new(smi, LiveGroups::default())
            .sample()
            .expect_err("cut");
        assert!(
            err.contains(&format!("more than {NVIDIA_SMI_OUTPUT_CAP} bytes")),
            "{err}"
        );
    }

    #[test]
    fn a_hung_nvidia_smi_is_killed_at_its_deadline() {
        let dir = tempfile::tempdir().expect("tempdir");
        let smi = fake_smi(dir.path(), "sleep 1000");
        let limits = RunLimits {
            timeout: Duration::from_millis(200),
            stdout_cap: NVIDIA_SMI_OUTPUT_CAP,
            stderr_cap: NVIDIA_SMI_STDERR_CAP,
        };
        let live = LiveGroups::default();
        let err = NvidiaSmiMonitor::with_limits(smi, limits, live.clone())
            .sample()
            .expect_err("timed out");
        assert!(err.contains("did not finish within"), "{err}");
        assert!(live.running().is_empty());
    }

    #[test]
    fn nvidia_smi_lines_parse_with_blank_lines_and_unknown_fields() {
        let text = "\n0, 24576, 1024, 7\n\n1, 16384, [N/A], 3\n2, 8192, 512, [N/A]\n";
        let gpus = parse_nvidia_smi(text).expect("parses");
        assert_eq!(
            gpus,
            vec![
                GpuSample {
                    index: 0,
                    total_mib: 24576,
                    used_mib: 1024,
                    utilization_pct: Some(7)
                },
                GpuSample {
                    index: 2,
                    total_mib: 8192,
                    used_mib: 512,
                    utilization_pct: None
                },
            ]
        );
    }

    #[test]
    fn nvidia_smi_output_without_a_readable_line_is_an_error_and_empty_output_is_no_gpu() {
        let err = parse_nvidia_smi("index, memory.total [MiB]\n").expect_err("header only");
        assert!(err.contains("no readable GPU line"), "{err}");
        assert_eq!(parse_nvidia_smi("\n  \n"), Ok(Vec::new()));
    }

    struct FakeNvml;

    impl NvmlDevices for FakeNvml {
        fn count(&self) -> Result<u32, String> {
            Ok(2)
        }
        fn memory(&self, index: u32) -> Result<(u64, u64), String> {
            Ok((u64::from(index + 1) * 8192 * MIB, 100 * MIB))
        }
        fn utilization(&self, index: u32) -> Result<u32, String> {
            match index {
                0 => Ok(42),
                _ => Err("Not Supported".into()),
            }
        }
    }

    #[test]
    fn nvml_answers_become_samples_in_mib() {
        let gpus = NvmlMonitor::over(Box::new(FakeNvml))
            .sample()
            .expect("sample");
        assert_eq!(gpus.len(), 2);
        assert_eq!((gpus[1].total_mib, gpus[1].used_mib), (16384, 100));
        assert_eq!(gpus[0].utilization_pct, Some(42));
        assert_eq!(gpus[1].utilization_pct, None);
    }

    #[test]
    fn without_nvml_or_nvidia_smi_auto_finds_no_gpu_and_samples_nothing() {
        let (monitor, why, _) = detect(
            MonitorKind::Auto,
            "/nonexistent/nvidia-smi",
            &LiveGroups::default(),
        );
        if NvmlMonitor::load().is_ok_and(|nvml| nvml.sample().is_ok_and(|g| !g.is_empty())) {
            // A machine with a real GPU: auto must have found it.
            assert_eq!(monitor.source(), "nvml", "{why}");
            return;
        }
        assert_eq!(monitor.source(), "none", "{why}");
        assert!(why.starts_with("no GPU"), "{why}");
        assert_eq!(monitor.sample(), Ok(Vec::new()));
    }
}
