//! `PYTORCH_CUDA_ALLOC_CONF`: the caching allocator's settings, parsed as PyTorch parses
//! them (`c10/cuda/CUDAAllocatorConfig.cpp`, `c10/core/AllocatorConfig.cpp`), and the size
//! rounding they decide.

use std::fmt;

/// 512 bytes: every block is a multiple of it.
pub const MIN_BLOCK_SIZE: u64 = 512;
/// Requests of at most 1 MiB go to the small pool.
pub const SMALL_SIZE: u64 = 1 << 20;
/// Small-pool segments are 2 MiB.
pub const SMALL_BUFFER: u64 = 2 << 20;
/// Large-pool segments for requests under 10 MiB are 20 MiB; also the oversize slack.
pub const LARGE_BUFFER: u64 = 20 << 20;
/// From 10 MiB on, a segment is the request rounded up to 2 MiB.
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
pub const ROUND_LARGE: u64 = 2 << 20;
/// `roundup_power2_divisions` has one value per power-of-two interval from 1 MiB.
pub const ROUNDUP_INTERVALS: usize = 16;

/// The caching allocator's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// `max_split_size_mb`, in bytes (`None`: unlimited, PyTorch's SIZE_MAX).
    pub max_split_size: Option<u64>,
    /// `max_non_split_rounding_mb` (newest PyTorch): the slack an oversize request may take.
    pub max_non_split_rounding: u64,
    /// `roundup_power2_divisions`, per interval [1 MiB·2^i, 1 MiB·2^(i+1)); 0 or 1: plain
    /// 512-byte rounding.
    pub roundup_power2_divisions: [u64; ROUNDUP_INTERVALS],
    /// `garbage_collection_threshold` (0: off; it acts only with a memory fraction).
    pub garbage_collection_threshold: f64,
    pub expandable_segments: bool,
    /// `per_process_memory_fraction` (newest PyTorch; also `set_per_process_memory_fraction`).
    pub memory_fraction: Option<f64>,
    /// `backend:cudaMallocAsync` was asked for: oomscope stands in for the native allocator
    /// and says so.
    pub async_backend: bool,
    /// The string as given.
    pub text: String,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            max_split_size: None,
            max_non_split_rounding: LARGE_BUFFER,
            roundup_power2_divisions: [0; ROUNDUP_INTERVALS],
            garbage_collection_threshold: 0.0,
            expandable_segments: false,
            memory_fraction: None,
            async_backend: false,
            text: String::new(),
        }
    }
}

/// A setting PyTorch would refuse (it raises at the first allocation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingsError(pub String);

impl fmt::Display for SettingsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PYTORCH_CUDA_ALLOC_CONF: {}", self.0)
    }
}

impl std::error::Error for SettingsError {}

impl Settings {
    /// Parses a `PYTORCH_CUDA_ALLOC_CONF` string: `key:value` pairs separated by commas,
    /// `roundup_power2_divisions` as a number or a `[256:1,512:2,>:8]` list. Options only
    /// other allocators read (pinned memory, the lock around cudaMalloc) are accepted and
    /// change nothing here.
    pub fn parse(text: &str) -> Result<Settings, SettingsError> {
        let mut s = Settings::default().with(text)?;
        s.text = text.to_string();
        Ok(s)
    }

    /// These settings with those of `text` on top (a what-if: `expandable_segments:True`
    /// over what a snapshot used); `text` becomes [`Settings::to_conf`] of the result.
    pub fn with(&self, text: &str) -> Result<Settings, SettingsError> {
        let mut s = self.clone();
        let err = |m: String| SettingsError(m);
        for item in split_top(text) {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let (key, value) = item
                .split_once(':')
                .map(|(k, v)| (k.trim(), v.trim()))
                .ok_or_else(|| err(format!("expected key:value, got {item:?}")))?;
            match key {
                "max_split_size_mb" => {
                    // A negative number wraps to SIZE_MAX in PyTorch's size_t: no limit.
                    let mb = stoi(key, value)?;
                    if (0..=20).contains(&mb) {
                        return Err(err(format!(
                            "CachingAllocator option max_split_size_mb too small, must be > 20 (got {value})"
                        )));
                    }
                    s.max_split_size = u64::try_from(mb).ok().map(|mb| mb << 20);
                }
                "max_non_split_rounding_mb" => {
                    let mb = stoi(key, value)?;
                    if (0..20).contains(&mb) {
                        return Err(err(format!(
                            "CachingAllocator option max_non_split_rounding_mb too small, must be >= 20 (got {value})"
                        )));
                    }
                    s.max_non_split_rounding = u64::try_from(mb).map_or(u64::MAX >> 20 << 20, |mb| mb << 20);
                }
                "garbage_collection_threshold" => {
                    let t = stod(key, value)?;
                    if !(t > 0.0 && t < 1.0) {
                        return Err(err(format!(
                            "garbage_collect_threshold is invalid, set it in (0.0, 1.0) (got {value})"
                        )));
                    }
                    s.garbage_collection_threshold = t;
                }
                "expandable_segments" => s.expandable_segments = bool_value(key, value)?,
                "roundup_power2_divisions" => s.roundup_power2_divisions = divisions(value)?,
                "per_process_memory_fraction" => {
                    let f = stod(key, value)?;
                    if !(0.0..=1.0).contains(&f) {
                        return Err(err(format!("per_process_memory_fraction {value} must be within [0, 1]")));
                    }
                    s.memory_fraction = Some(f);
                }
                "backend" => match value {
                    "native" => s.async_backend = false,
                    "cudaMallocAsync" => s.async_backend = true,
                    other => return Err(err(format!("unknown backend {other:?}; expected native or cudaMallocAsync"))),
                },
                // Options other parts of PyTorch read: checked as PyTorch checks them.
                "release_lock_on_cudamalloc"
                | "release_lock_on_hipmalloc"
                | "pinned_use_cuda_host_register"
                | "pinned_use_hip_host_register"
                | "pinned_use_background_threads"
                | "graph_capture_record_stream_reuse" => {
                    bool_value(key, value)?;
                }
                "pinned_num_register_threads" => {
                    let n = stoi(key, value)?;
                    if !u64::try_from(n).is_ok_and(u64::is_power_of_two) {
                        return Err(err(format!("Number of register threads has to be power of 2 (got {value})")));
                    }
                    if n > 128 {
                        return Err(err(format!(
                            "Number of register threads should be less than or equal to 128 (got {value})"
                        )));
                    }
                }
                "roundup_bypass_threshold_mb" => {
                    stoi(key, value)?;
                }
                other => return Err(err(format!("unrecognized option {other:?}"))),
            }
        }
        s.text = s.to_conf();
        Ok(s)
    }

    /// The settings as a `PYTORCH_CUDA_ALLOC_CONF` string, defaults left out (empty: all
    /// defaults).
    pub fn to_conf(&self) -> String {
        let mut parts = Vec::new();
        if let Some(m) = self.max_split_size {
            parts.push(format!("max_split_size_mb:{}", m >> 20));
        }
        if self.max_non_split_rounding != LARGE_BUFFER {
            parts.push(format!("max_non_split_rounding_mb:{}", self.max_non_split_rounding >> 20));
        }
        let d = &self.roundup_power2_divisions;
        if d.iter().any(|&v| v > 1) {
            if d.iter().all(|&v| v == d[0]) {
                parts.push(format!("roundup_power2_divisions:{}", d[0]));
            } else {
                let list: Vec<String> = d.iter().enumerate().map(|(i, v)| format!("{}:{v}", 1u64 << i)).collect();
                parts.push(format!("roundup_power2_divisions:[{}]", list.join(",")));
            }
        }
        if self.garbage_collection_threshold > 0.0 {
            parts.push(format!("garbage_collection_threshold:{}", self.garbage_collection_threshold));
        }
        if self.expandable_segments {
            parts.push("expandable_segments:True".into());
        }
        if let Some(f) = self.memory_fraction {
            parts.push(format!("per_process_memory_fraction:{f}"));
        }
        if self.async_backend {
            parts.push("backend:cudaMallocAsync".into());
        }
        parts.join(",")
    }

    /// The divisions that apply to `size`.
    pub fn divisions_for(&self, size: u64) -> u64 {
        let log = 63 - size.max(1).leading_zeros() as usize;
        let index = log.saturating_sub(20).min(ROUNDUP_INTERVALS - 1);
        self.roundup_power2_divisions[index]
    }

    /// `round_size`: at least 512, then 512-byte steps, or the power-of-two division when
    /// `roundup_power2_divisions` asks for one.
    pub fn round_size(&self, size: u64) -> u64 {
        if size < MIN_BLOCK_SIZE {
            return MIN_BLOCK_SIZE;
        }
        let d = self.divisions_for(size);
        if d > 1 && size > MIN_BLOCK_SIZE * d {
            roundup_power2_next_division(size, d)
        } else {
            // Saturating: a request near 2^64 is refused by the device, not an overflow.
            size.div_ceil(MIN_BLOCK_SIZE).saturating_mul(MIN_BLOCK_SIZE)
        }
    }

    /// The oversize threshold (`max_split_size`, SIZE_MAX when unset).
    pub fn max_split(&self) -> u64 {
        self.max_split_size.unwrap_or(u64::MAX)
    }
}

/// `roundup_power2_next_division`: powers of two stay; otherwise the next multiple of
/// (the power of two below) / divisions.
pub fn roundup_power2_next_division(size: u64, divisions: u64) -> u64 {
    if size.is_power_of_two() {
        return size;
    }
    let floor = 1u64 << (63 - size.leading_zeros());
    let step = floor >> (63 - divisions.leading_zeros());
    if step == 0 {
        return floor.checked_shl(1).filter(|&f| f != 0).unwrap_or(u64::MAX);
    }
    let down = size & !(step - 1);
    if down == size { size } else { down.saturating_add(step) }
}

/// The settings' comma-separated items, keeping a bracketed list whole.
fn split_top(text: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&text[start..]);
    items
}

fn bool_value(key: &str, value: &str) -> Result<bool, SettingsError> {
    match value {
        "True" => Ok(true),
        "False" => Ok(false),
        other => Err(SettingsError(format!("Expected a single True/False argument for {key} (got {other:?})"))),
    }
}

/// C++'s `std::stoi`, as PyTorch reads its integer options: an optional sign and the
/// digits the text starts with (`20.5` is 20, `1e400` is 1, `0x10` is 0). No digits (`NaN`,
/// `inf`, `.5`) or a number past an `int` throws, and PyTorch stops at its first allocation.
fn stoi(key: &str, value: &str) -> Result<i64, SettingsError> {
    let t = value.trim_start();
    let sign_len = usize::from(t.starts_with(['+', '-']));
    let digits = t[sign_len..].bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err(SettingsError(format!(
            "{key} takes an integer, and {value:?} does not start with one (PyTorch's std::stoi throws invalid_argument)"
        )));
    }
    t[..sign_len + digits].parse::<i32>().map(i64::from).map_err(|_| {
        SettingsError(format!("{key}: {value} is past the range of an int (PyTorch's std::stoi throws out_of_range)"))
    })
}

/// C++'s `std::stod`, as PyTorch reads its fractions: the longest number the text starts
/// with (`0.5abc` is 0.5; `nan` and `inf` are numbers, refused later by the range checks);
/// none, or one past a double's range (`1e400`), throws.
fn stod(key: &str, value: &str) -> Result<f64, SettingsError> {
    let t = value.trim_start();
    let parsed = (1..=t.len()).rev().filter(|&n| t.is_char_boundary(n)).find_map(|n| {
        let p = &t[..n];
        p.parse::<f64>().ok().map(|v| (p, v))
    });
    let Some((p, v)) = parsed else {
        return Err(SettingsError(format!(
            "{key} takes a number, and {value:?} does not start with one (PyTorch's std::stod throws invalid_argument)"
        )));
    };
    let lower = p.trim_start_matches(['+', '-']).to_ascii_lowercase();
    let named = lower.starts_with("inf") || lower == "nan";
    let has_nonzero_digit = p.bytes().take_while(|b| *b != b'e' && *b != b'E').any(|b| (b'1'..=b'9').contains(&b));
    if (v.is_infinite() && !named) || (v == 0.0 && has_nonzero_digit) {
        return Err(SettingsError(format!(
            "{key}: {value} is past the range of a double (PyTorch's std::stod throws out_of_range)"
        )));
    }
    Ok(v)
}

/// `roundup_power2_divisions:4` (every interval) or `[256:1,512:2,1024:4,>:8]`: a key K
/// (MiB, a power of two) sets the interval starting at K MiB; the first key also sets the
/// intervals below it; `>` sets the rest. (PyTorch 2.x fills `>` from the last key's
/// interval on, overwriting it, as here; PyTorch's 2025 parser starts after it.)
fn divisions(value: &str) -> Result<[u64; ROUNDUP_INTERVALS], SettingsError> {
    let err = |m: String| SettingsError(format!("roundup_power2_divisions: {m}"));
    let check = |v: u64| {
        if v == 0 || v.is_power_of_two() {
            Ok(v)
        } else {
            Err(err(format!("For roundups, the divisons has to be power of 2 or 0 to disable roundup (got {v})")))
        }
    };
    let mut out = [0u64; ROUNDUP_INTERVALS];
    let Some(list) = value.strip_prefix('[') else {
        let v = stoi("roundup_power2_divisions", value)?;
        let v = u64::try_from(v)
            .ok()
            .filter(|v| v.is_power_of_two())
            .ok_or_else(|| SettingsError(format!("For roundups, the divisons has to be power of 2 (got {value})")))?;
        out = [v; ROUNDUP_INTERVALS];
        return Ok(out);
    };
    let list = list.strip_suffix(']').ok_or_else(|| err(format!("{value:?} has no closing ]")))?;
    let mut first = true;
    let mut last_index = 0usize;
    for pair in list.split(',') {
        let (k, v) = pair.split_once(':').ok_or_else(|| err(format!("{pair:?} is not key:value")))?;
        let v = check(u64::try_from(stoi("roundup_power2_divisions", v.trim())?).unwrap_or(u64::MAX))?;
        if k.trim() == ">" {
            for slot in out.iter_mut().skip(last_index) {
                *slot = v;
            }
            continue;
        }
        let mb = u64::try_from(stoi("roundup_power2_divisions", k.trim())?).unwrap_or(u64::MAX);
        if !mb.is_power_of_two() {
            return Err(err(format!("the interval {mb} MiB is not a power of 2")));
        }
        let index = (63 - mb.leading_zeros() as usize).min(ROUNDUP_INTERVALS - 1);
        if first {
            for slot in out.iter_mut().take(index) {
                *slot = v;
            }
            first = false;
        }
        out[index] = v;
        last_index = index;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn rounding_follows_pytorch() {
        let s = Settings::default();
        assert_eq!(s.round_size(1), 512);
        assert_eq!(s.round_size(513), 1024);
        assert_eq!(s.round_size(25690112 - 1), 25690112);
        // PyTorch's documentation examples: 1200 with 4 divisions is 1280; 84 MiB with 4 is
        // 96 MiB and with 8 is 88 MiB.
        assert_eq!(roundup_power2_next_division(1200, 4), 1280);
        assert_eq!(roundup_power2_next_division(84 * MIB, 4), 96 * MIB);
        assert_eq!(roundup_power2_next_division(84 * MIB, 8), 88 * MIB);
        let s = Settings::parse("roundup_power2_divisions:4").unwrap();
        assert_eq!(s.round_size(84 * MIB), 96 * MIB);
        assert_eq!(s.round_size(1200), 1536, "under 512 x 4 bytes: plain 512 rounding");
    }

    #[test]
    fn division_lists_set_intervals_as_pytorch_2_does() {
        let s = Settings::parse("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]").unwrap();
        // 256 MiB is interval 8; the first key fills 0..8 too.
        assert_eq!(&s.roundup_power2_divisions[..8], &[1; 8]);
        assert_eq!(s.roundup_power2_divisions[8], 1);
        assert_eq!(s.roundup_power2_divisions[9], 2);
        // `>` from the last key's interval on: [1, 2) GiB gets 8.
        assert_eq!(&s.roundup_power2_divisions[10..], &[8; 6]);
        assert!(Settings::parse("roundup_power2_divisions:[256:3]").is_err());
    }

    #[test]
    fn settings_strings_parse_and_refuse_as_pytorch() {
        let s = Settings::parse("expandable_segments:True,max_split_size_mb:128").unwrap();
        assert!(s.expandable_segments);
        assert_eq!(s.max_split_size, Some(128 * MIB));
        assert_eq!(Settings::parse("").unwrap(), Settings::default());
        assert!(Settings::parse("max_split_size_mb:20").is_err(), "must be > 20");
        assert!(Settings::parse("garbage_collection_threshold:1.5").is_err());
        assert!(Settings::parse("expandable_segment:True").unwrap_err().0.contains("unrecognized option"));
        let s = Settings::parse("garbage_collection_threshold:0.6,max_split_size_mb:512,backend:native").unwrap();
        assert_eq!(s.garbage_collection_threshold, 0.6);
        let w = s.with("expandable_segments:True").unwrap();
        assert_eq!(w.to_conf(), "max_split_size_mb:512,garbage_collection_threshold:0.6,expandable_segments:True");
        assert_eq!(Settings::parse(&w.to_conf()).unwrap().to_conf(), w.text);
    }

    #[test]
    fn numbers_are_read_as_pytorchs_stoi_and_stod_read_them() {
        // Integers: the leading digits; what has none, or is past an int, is refused.
        for bad in ["NaN", "nan", "-nan", "inf", ".5", "abc", "99999999999"] {
            let e = Settings::parse(&format!("max_split_size_mb:{bad}")).unwrap_err().0;
            assert!(e.contains("std::stoi"), "{bad}: {e}");
        }
        for too_small in ["20.5", "20.0000001", "1e400", "0x400", "20"] {
            let e = Settings::parse(&format!("max_split_size_mb:{too_small}")).unwrap_err().0;
            assert!(e.contains("too small, must be > 20"), "{too_small}: {e}");
        }
        let s = Settings::parse("max_split_size_mb:21.9").unwrap();
        assert_eq!(s.max_split_size, Some(21 * MIB), "PyTorch reads 21");
        assert_eq!(s.to_conf(), "max_split_size_mb:21");
        assert_eq!(Settings::parse("max_split_size_mb:-5").unwrap().max_split_size, None, "size_t wraps: no limit");
        // Fractions: the longest number the text starts with; NaN and infinities fail the
        // range check, numbers past a double are refused by stod itself.
        assert_eq!(Settings::parse("garbage_collection_threshold:0.5abc").unwrap().garbage_collection_threshold, 0.5);
        for bad in ["nan", "NaN", "inf", "-inf", "1", "0"] {
            let e = Settings::parse(&format!("garbage_collection_threshold:{bad}")).unwrap_err().0;
            assert!(e.contains("set it in (0.0, 1.0)"), "{bad}: {e}");
        }
        for bad in ["1e400", "1e-400", "x"] {
            let e = Settings::parse(&format!("garbage_collection_threshold:{bad}")).unwrap_err().0;
            assert!(e.contains("std::stod"), "{bad}: {e}");
        }
        assert!(Settings::parse("per_process_memory_fraction:nan").is_err());
        // Booleans: True or False, as written.
        for bad in ["true", "1", "yes"] {
            let e = Settings::parse(&format!("expandable_segments:{bad}")).unwrap_err().0;
            assert!(e.contains("Expected a single True/False argument for expandable_segments"), "{e}");
        }
        assert!(Settings::parse("roundup_power2_divisions:3").unwrap_err().0.contains("power of 2"));
        assert!(Settings::parse("roundup_power2_divisions:4.7").is_ok(), "stoi reads 4");
        assert!(Settings::parse("pinned_num_register_threads:3").is_err());
        assert!(Settings::parse("pinned_num_register_threads:256").is_err());
        assert!(Settings::parse("release_lock_on_cudamalloc:yes").is_err());
    }
}
