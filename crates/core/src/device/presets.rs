//! The cards people have, by name, for `--device`.

use oomscope_base::size::parse_size;

const GIB: u64 = 1 << 30;

/// A GPU model and its memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Preset {
    /// What to type: `gtx-1080-ti`.
    pub name: &'static str,
    /// What it is: `GeForce GTX 1080 Ti`.
    pub model: &'static str,
    pub total: u64,
    pub arch: Arch,
}

/// What decides how CUDA's kernels split their work, and so their scratch memory: the
/// multiprocessors, and the compute capability (threads per multiprocessor, cuBLAS's
/// workspace size).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arch {
    pub sms: u32,
    pub cc: (u8, u8),
}

const fn arch(sms: u32, major: u8, minor: u8) -> Arch {
    Arch { sms, cc: (major, minor) }
}

/// An H100 SXM's: what the emulation assumes for a device given as a size.
pub const DEFAULT_ARCH: Arch = arch(132, 9, 0);

pub const PRESETS: &[Preset] = &[
    Preset { name: "gtx-1080", model: "GeForce GTX 1080", total: 8 * GIB, arch: arch(20, 6, 1) },
    Preset { name: "gtx-1080-ti", model: "GeForce GTX 1080 Ti", total: 11 * GIB, arch: arch(28, 6, 1) },
    Preset { name: "rtx-2080-ti", model: "GeForce RTX 2080 Ti", total: 11 * GIB, arch: arch(68, 7, 5) },
    Preset { name: "rtx-3060", model: "GeForce RTX 3060", total: 12 * GIB, arch: arch(28, 8, 6) },
    Preset { name: "rtx-3090", model: "GeForce RTX 3090", total: 24 * GIB, arch: arch(82, 8, 6) },
    Preset { name: "rtx-4090", model: "GeForce RTX 4090", total: 24 * GIB, arch: arch(128, 8, 9) },
    Preset { name: "t4", model: "Tesla T4", total: 16 * GIB, arch: arch(40, 7, 5) },
    Preset { name: "v100-16", model: "Tesla V100 16GB", total: 16 * GIB, arch: arch(80, 7, 0) },
    Preset { name: "v100-32", model: "Tesla V100 32GB", total: 32 * GIB, arch: arch(80, 7, 0) },
    Preset { name: "a100-40", model: "A100 40GB", total: 40 * GIB, arch: arch(108, 8, 0) },
    Preset { name: "a100-80", model: "A100 80GB", total: 80 * GIB, arch: arch(108, 8, 0) },
    Preset { name: "h100", model: "H100 80GB", total: 80 * GIB, arch: arch(132, 9, 0) },
    Preset { name: "h200", model: "H200", total: 141 * GIB, arch: arch(132, 9, 0) },
];

/// A device given on the command line: a preset name (`gtx-1080-ti`, `1080ti`, `A100-80`)
/// or a size (`8GiB`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceSpec {
    pub total: u64,
    /// The preset's model name, or `simulated GPU`.
    pub model: String,
    /// The preset's architecture; a size has none.
    pub arch: Option<Arch>,
}

fn normalize(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .collect::<String>()
        .trim_start_matches("geforce")
        .trim_start_matches("tesla")
        .trim_start_matches("nvidia")
        .to_string()
}

/// Parses `--device`.
pub fn parse_device(s: &str) -> Result<DeviceSpec, oomscope_base::Problem> {
    let wanted = normalize(s);
    let wanted_no_vendor = wanted.trim_start_matches("gtx").trim_start_matches("rtx").to_string();
    for p in PRESETS {
        let n = normalize(p.name);
        if n == wanted || n.trim_start_matches("gtx").trim_start_matches("rtx") == wanted_no_vendor {
            return Ok(DeviceSpec { total: p.total, model: p.model.to_string(), arch: Some(p.arch) });
        }
    }
    match parse_size(s) {
        Ok(total) if total > 0 => Ok(DeviceSpec {
            total: oomscope_base::size::device_bytes(total)?,
            model: "simulated GPU".to_string(),
            arch: None,
        }),
        Ok(_) => Err(oomscope_base::problem!("a device of 0 bytes cannot hold anything")),
        Err(e) => {
            let names: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
            // Something that starts like a number was meant as a size: say what is wrong with
            // it (`16GB` is ambiguous), as `--limit` does.
            if s.trim_start().starts_with(|c: char| c.is_ascii_digit() || c == '.') {
                Err(oomscope_base::problem!("{e}; or a known card ({})", names.join(", ")))
            } else {
                Err(oomscope_base::problem!("{s:?} is neither a size (8GiB) nor a known card ({})", names.join(", ")))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_and_sizes() {
        assert_eq!(parse_device("gtx-1080-ti").unwrap().total, 11 * GIB);
        assert_eq!(parse_device("1080Ti").unwrap().model, "GeForce GTX 1080 Ti");
        assert_eq!(parse_device("GeForce GTX 1080").unwrap().total, 8 * GIB);
        assert_eq!(parse_device("A100-80").unwrap().total, 80 * GIB);
        assert_eq!(parse_device("h200").unwrap().total, 141 * GIB);
        assert_eq!(
            parse_device("6GiB").unwrap(),
            DeviceSpec { total: 6 * GIB, model: "simulated GPU".into(), arch: None }
        );
        assert_eq!(parse_device("a100-40").unwrap().arch, Some(Arch { sms: 108, cc: (8, 0) }));
        assert!(parse_device("titan-z").unwrap_err().contains("neither a size"));
        assert!(parse_device("0").is_err());
        // A size with a decimal unit is explained as --limit explains it.
        let e = parse_device("16GB").unwrap_err();
        assert!(e.contains("decimal units") && e.contains("gtx-1080"), "{e}");
    }
}
