//! Byte sizes: parsing what users type (`9.1GiB`) and printing what TensorFlow prints.
//!
//! Two printers exist because TensorFlow has two: `HumanReadableNumBytes` in the
//! allocator dump (`957.03MiB`) and StreamExecutor's in the driver log (`11.00G`).
//! Users compare our output with their logs, so both are reproduced to the byte.

use std::fmt;

const KIB: u64 = 1024;

/// The most memory oomscope takes a device, a limit or a recorded figure to have: 1 PiB.
/// The largest accelerators hold a few hundred GiB; a figure beyond this is a typo or a
/// damaged file, and taking it would cost time or memory in proportion to it.
pub const MAX_DEVICE_BYTES: u64 = 1 << 50;

/// `bytes` as a device's size or limit: refused past [`MAX_DEVICE_BYTES`], with the size.
pub fn device_bytes(bytes: u64) -> Result<u64, crate::Problem> {
    if bytes > MAX_DEVICE_BYTES {
        Err(crate::Problem(format!(
            "{} ({bytes} bytes) is beyond any device: oomscope takes sizes up to {}",
            human(bytes),
            human(MAX_DEVICE_BYTES)
        )))
    } else {
        Ok(bytes)
    }
}

/// How the C runtime that printed a log rounds a halfway `%.1f` / `%.2f`: glibc (Linux,
/// macOS) rounds the exact binary value to even, so 1280 bytes (1.25 KiB) print `1.2KiB`;
/// Microsoft's runtime (TF on Windows) rounds half away from zero: `1.3KiB`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Rounding {
    #[default]
    Glibc,
    Msvc,
}

/// TensorFlow's `strings::HumanReadableNumBytes`: `1023B`, `1.0KiB`, `957.03MiB`.
///
/// The value is divided by 1024 with integer division while it is at least 1 MiB and
/// only the last step is done in floating point, exactly as TF does; so
/// `human_bytes(1610612735)` is `1.50GiB`, not a rounded-up `1.50GiB` by luck.
pub fn human_bytes(n: i64) -> String {
    human_bytes_with(n, Rounding::Glibc)
}

/// [`human_bytes`] as printed by a given C runtime.
pub fn human_bytes_with(n: i64, rounding: Rounding) -> String {
    if n == i64::MIN {
        return "-8E".to_string();
    }
    scaled(n.unsigned_abs(), if n < 0 { "-" } else { "" }, rounding)
}

/// TF's scaling on the magnitude. TF takes an `int64`, but the same steps on a `u64` stay
/// exact up to `u64::MAX` (16.00EiB): integer division, then one division in `f64` of a
/// value below 2^20, which is exact.
fn scaled(mut v: u64, neg: &str, rounding: Rounding) -> String {
    if v < KIB {
        return format!("{neg}{v}B");
    }
    let units = [b'K', b'M', b'G', b'T', b'P', b'E'];
    let mut unit = 0;
    while v >= KIB * KIB {
        v /= KIB;
        unit += 1;
    }
    let mut value = v as f64 / 1024.0;
    let decimals = if unit == 0 { 1 } else { 2 };
    if rounding == Rounding::Msvc {
        // `value` has at most ten binary fraction digits, so scaling it is exact and
        // `round` (half away from zero) decides the tie as MSVC's printf does.
        let scale = if decimals == 1 { 10.0 } else { 100.0 };
        value = (value * scale).round() / scale;
    }
    let u = units[unit] as char;
    format!("{neg}{value:.decimals$}{u}iB")
}

/// [`human`] as printed by a given C runtime.
pub fn human_with(n: u64, rounding: Rounding) -> String {
    scaled(n, "", rounding)
}

/// [`human_bytes`] for unsigned sizes, exact over the whole range: sizes from 2^63 up,
/// which TF's signed version cannot take, print as the same steps give them (`u64::MAX` is
/// `16.00EiB`), not clamped to `8.00EiB`.
pub fn human(n: u64) -> String {
    human_with(n, Rounding::Glibc)
}

/// A size as `--device` and `--limit` take it, exactly: in the largest binary unit that
/// divides it (`8GiB`, `96MiB`), else in bytes.
pub fn exact(n: u64) -> String {
    for (unit, shift) in [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)] {
        if n > 0 && n.is_multiple_of(1u64 << shift) {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

/// StreamExecutor's variant used in `failed to allocate 11.00G (11811160064 bytes)`:
/// the same scaling as [`human_bytes`] without the `iB`.
pub fn human_bytes_driver(n: u64) -> String {
    let s = human(n);
    match s.strip_suffix("iB") {
        Some(stem) => stem.to_string(),
        None => s,
    }
}

/// A byte count that prints as `text` in TF's format (`957.03MiB`, `1.9KiB`, `0B`, or the
/// driver's `11.00G`), for logs that give only the rounded figure. `None` when no count does.
///
/// `human_bytes` truncates by 1024 until the last step, so the count is rebuilt the same way:
/// the printed value times 1024 is the truncated quotient, which is then scaled back up.
pub fn parse_human(text: &str) -> Option<u64> {
    let t = text.trim();
    let (digits, unit) = t.split_at(t.find(|c: char| !(c.is_ascii_digit() || c == '.'))?);
    let value: f64 = digits.parse().ok()?;
    let unit = unit.strip_suffix("iB").unwrap_or(unit);
    let step = match unit {
        "B" => return value.fract().eq(&0.0).then_some(value as u64).filter(|&b| human(b) == t),
        "K" | "M" | "G" | "T" | "P" | "E" => "KMGTPE".find(unit)? as u32,
        _ => return None,
    };
    // value = q / 1024 where q = n / 1024^step (truncated): try the nearest quotients.
    let scale = 1024u128.pow(step);
    let q = (value * 1024.0).round() as i128;
    let driver = !t.ends_with("iB");
    let printed = |b: u64| if driver { human_bytes_driver(b) } else { human(b) };
    for dq in [0i128, -1, 1, -2, 2] {
        let qq = q + dq;
        if qq < 0 {
            continue;
        }
        // Near 16EiB the nearest quotient can pass u64::MAX while the one below it fits.
        let Ok(b) = u64::try_from(qq as u128 * scale) else { continue };
        if printed(b) == t {
            return Some(b);
        }
    }
    None
}

/// PyTorch's `format_size`, in every release: `1024 bytes`, `20.00 MiB`, `1.50 GiB` (two
/// decimals; a unit is used up to and including its next power, so 1 MiB is `1024.00 KiB`).
pub fn torch(n: u64) -> String {
    if n <= 1024 {
        format!("{n} bytes")
    } else if n <= 1 << 20 {
        format!("{:.2} KiB", n as f64 / 1024.0)
    } else if n <= 1 << 30 {
        format!("{:.2} MiB", n as f64 / (1u64 << 20) as f64)
    } else {
        format!("{:.2} GiB", n as f64 / (1u64 << 30) as f64)
    }
}

/// A figure as an out-of-memory message prints it, in whichever framework's style: PyTorch's
/// `22.78 GiB` and `512 bytes`, TF's and XLA's `6.00MiB` and `0B`, a TPU's `17.47G`, MPS's
/// `18.08 GB`. Units are binary whatever their spelling (every one of these formatters
/// divides by 1024). The count returned prints back as the figure when the style allows it
/// (TF's truncating format is rebuilt exactly), else it is the figure times its unit.
pub fn parse_figure(text: &str) -> Option<u64> {
    let t = text.trim().trim_end_matches(['.', ',', ';', ')']);
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (digits, unit) = (&t[..split], t[split..].trim());
    if digits.is_empty() {
        return None;
    }
    let value: f64 = digits.parse().ok()?;
    let power = match unit.to_ascii_lowercase().as_str() {
        "b" | "bytes" | "byte" => 0,
        "k" | "kb" | "kib" => 1,
        "m" | "mb" | "mib" => 2,
        "g" | "gb" | "gib" => 3,
        "t" | "tb" | "tib" => 4,
        "p" | "pb" | "pib" => 5,
        // XLA's compiler prints exabytes for requests no device has (`Requires 3.47E`).
        "e" | "eb" | "eib" => 6,
        _ => return None,
    };
    if !text.trim().contains(' ')
        && let Some(b) = parse_human(t)
    {
        return Some(b);
    }
    let bytes = value * 1024f64.powi(power);
    (bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64).then(|| bytes.round() as u64)
}

/// Why a size string was refused. Displays as a sentence that says what is accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeError {
    input: String,
    reason: &'static str,
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not a size: {}; write bytes (1073741824) or a number with a binary unit \
             (512MiB, 1GiB, 9.1GiB; B, KiB, MiB, GiB, TiB, PiB, or K, M, G, T, P)",
            self.input, self.reason
        )
    }
}

impl std::error::Error for SizeError {}

/// Parses `1073741824`, `1GiB`, `9.1GiB`, `512MiB`, `11G`, `1.5 TiB`.
///
/// Units are binary (`G` = `GiB` = 2^30, as TensorFlow prints them). `GB`-style units are
/// refused instead of guessed: a card sold as "16 GB" has 16 GiB, while SI says 16e9,
/// and a silent 7% error in a memory limit is worse than a clear message.
/// Fractions are computed exactly and rounded down to a whole byte.
pub fn parse_size(input: &str) -> Result<u64, SizeError> {
    let err = |reason| SizeError { input: input.to_string(), reason };
    let s = input.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (number, unit) = (&s[..split], s[split..].trim());
    if number.is_empty() {
        return Err(err("it does not start with a number"));
    }
    let multiplier: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "p" | "pib" => 1 << 50,
        "kb" | "mb" | "gb" | "tb" | "pb" => {
            return Err(err("decimal units (KB, MB, GB, TB) are ambiguous for GPU memory"));
        }
        _ => return Err(err("unknown unit")),
    };
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if frac_part.contains('.') || (int_part.is_empty() && frac_part.is_empty()) {
        return Err(err("the number is malformed"));
    }
    if frac_part.len() > 18 {
        return Err(err("too many decimal places"));
    }
    let whole: u128 =
        if int_part.is_empty() { 0 } else { int_part.parse().map_err(|_| err("the number is too large"))? };
    let frac: u128 =
        if frac_part.is_empty() { 0 } else { frac_part.parse().map_err(|_| err("the number is malformed"))? };
    if multiplier == 1 && frac != 0 {
        return Err(err("a byte count must be a whole number"));
    }
    let scale = 10u128.pow(frac_part.len() as u32);
    let bytes = whole
        .checked_mul(multiplier as u128)
        .and_then(|w| w.checked_add(frac * multiplier as u128 / scale))
        .ok_or_else(|| err("the number is too large"))?;
    u64::try_from(bytes).map_err(|_| err("the number is too large"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn exact_sizes_read_back_as_themselves() {
        for (n, text) in [(8u64 << 30, "8GiB"), (96 << 20, "96MiB"), (1536 << 20, "1536MiB"), (1000, "1000"), (0, "0")]
        {
            assert_eq!(super::exact(n), text);
            assert_eq!(super::parse_size(text).unwrap(), n, "{text}");
        }
    }

    use super::*;

    #[test]
    fn torch_sizes_print_and_parse_as_pytorch_prints_them() {
        assert_eq!(torch(512), "512 bytes");
        assert_eq!(torch(1024), "1024 bytes");
        assert_eq!(torch(1 << 20), "1024.00 KiB");
        assert_eq!(torch(20 << 20), "20.00 MiB");
        assert_eq!(torch(1 << 30), "1024.00 MiB");
        for figure in ["22.78 GiB", "1.44 MiB", "105.14 MiB", "512 bytes", "3.50 KiB"] {
            let b = parse_figure(figure).unwrap();
            assert_eq!(torch(b), figure);
        }
        assert_eq!(parse_figure("6.00MiB"), Some(6 << 20));
        assert_eq!(human(parse_figure("384.0KiB").unwrap()), "384.0KiB");
        assert_eq!(parse_figure("0B"), Some(0));
        assert_eq!(human_bytes_driver(parse_figure("17.47G").unwrap()), "17.47G");
        assert_eq!(parse_figure("18.08 GB"), Some((18.08 * (1u64 << 30) as f64).round() as u64));
        assert_eq!(parse_figure("7406166528 bytes"), Some(7406166528));
        assert_eq!(parse_figure("GiB"), None);
        assert_eq!(parse_figure("12 parrots"), None);
    }

    #[test]
    fn windows_logs_round_halfway_values_away_from_zero() {
        assert_eq!(human(1280), "1.2KiB");
        assert_eq!(human_with(1280, Rounding::Msvc), "1.3KiB");
        assert_eq!(human_with(1331, Rounding::Msvc), "1.3KiB");
        // 2.125 MiB: an exact tie at two decimals.
        assert_eq!(human(2228224), "2.12MiB");
        assert_eq!(human_with(2228224, Rounding::Msvc), "2.13MiB");
        assert_eq!(human_with(1003520000, Rounding::Msvc), human(1003520000), "no tie, no difference");
        assert_eq!(human_with(1023, Rounding::Msvc), "1023B");
    }

    #[test]
    fn human_bytes_matches_tensorflow() {
        // Values from TF's strings::HumanReadableNumBytes tests and the seeds' logs.
        assert_eq!(human_bytes(0), "0B");
        assert_eq!(human_bytes(1023), "1023B");
        assert_eq!(human_bytes(1024), "1.0KiB");
        assert_eq!(human_bytes(1927), "1.9KiB");
        assert_eq!(human_bytes(12345678), "11.77MiB");
        assert_eq!(human_bytes(1 << 30), "1.00GiB");
        assert_eq!(human_bytes(-3 * 1024), "-3.0KiB");
        assert_eq!(human_bytes(i64::MIN), "-8E");
        assert_eq!(human_bytes(i64::MAX), "8.00EiB");
        assert_eq!(human_bytes(1_003_520_000), "957.03MiB"); // the MNIST log: shape [10000,32,28,28] float32
        assert_eq!(human_bytes(471_859_200), "450.00MiB"); // the U-Net log: 2x720x1280x64 float32
        assert_eq!(human_bytes(268_435_456), "256.00MiB");
        // Integer division before the last step: 1 MiB - 1 byte stays in KiB.
        assert_eq!(human_bytes((1 << 20) - 1), "1024.0KiB");
    }

    #[test]
    fn sizes_from_2_pow_63_up_print_exactly() {
        // TF's steps on the whole unsigned range: nothing clamps at i64::MAX (8.00EiB).
        assert_eq!(human(u64::MAX), "16.00EiB");
        assert_eq!(human(1 << 63), "8.00EiB");
        assert_eq!(human((1 << 63) + (1 << 62)), "12.00EiB");
        assert_eq!(human(u64::MAX - (1 << 52)), "16.00EiB");
        assert_eq!(human(15 << 60), "15.00EiB");
        assert_eq!(human_with(u64::MAX, Rounding::Msvc), "16.00EiB");
        assert_eq!(human_bytes_driver(u64::MAX), "16.00E");
        // i64::MAX is the largest TF itself prints: the unsigned path agrees with it there.
        assert_eq!(human(i64::MAX as u64), human_bytes(i64::MAX));
        // PyTorch's format_size takes a uint64 and divides in double.
        assert_eq!(torch(u64::MAX), "17179869184.00 GiB");
        for n in [1u64 << 63, u64::MAX, u64::MAX - 1023, 3 << 62] {
            let text = human(n);
            let back = parse_human(&text).unwrap_or_else(|| panic!("{text}"));
            assert_eq!(human(back), text, "{n}");
        }
    }

    #[test]
    fn parse_human_inverts_human_bytes() {
        for n in [
            0u64,
            1,
            1023,
            1024,
            1927,
            12_345_678,
            1 << 30,
            1_003_520_000,
            471_859_200,
            2_995_773_440,
            10_000_000_000_000,
        ] {
            let text = human(n);
            let back = parse_human(&text).unwrap_or_else(|| panic!("{text}"));
            assert_eq!(human(back), text, "{n}");
        }
        assert_eq!(parse_human("11.00G").map(human_bytes_driver), Some("11.00G".to_string()));
        assert_eq!(parse_human("957.03MiB").map(human), Some("957.03MiB".to_string()));
        for bad in ["", "MiB", "3.2XB", "1.5B", "abc"] {
            assert_eq!(parse_human(bad), None, "{bad}");
        }
    }

    #[test]
    fn driver_variant_drops_ib() {
        assert_eq!(human_bytes_driver(11_811_160_064), "11.00G");
        assert_eq!(human_bytes_driver(10_630_043_648), "9.90G");
        assert_eq!(human_bytes_driver(100), "100B");
    }

    #[test]
    fn parse_accepts_what_the_docs_promise() {
        assert_eq!(parse_size("1073741824"), Ok(1 << 30));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("9.1GiB"), Ok(9_771_050_598)); // 9.1 * 2^30 rounded down
        assert_eq!(parse_size("11G"), Ok(11 << 30));
        assert_eq!(parse_size(" 1.5 TiB "), Ok(3 << 39));
        assert_eq!(parse_size("0.5k"), Ok(512));
        assert_eq!(parse_size("256b"), Ok(256));
        assert_eq!(parse_size(".5GiB"), Ok(1 << 29));
    }

    #[test]
    fn parse_refuses_with_a_reason() {
        for bad in ["", "GiB", "-1", "1.2.3GiB", "16GB", "1XiB", "1.5", "99999999999999999999999", "20000000TiB"] {
            let e = parse_size(bad).expect_err(bad);
            let msg = e.to_string();
            assert!(msg.contains("is not a size"), "{msg}");
        }
        assert!(parse_size("16GB").unwrap_err().to_string().contains("ambiguous"));
    }
}
