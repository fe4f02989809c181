//! Numbers as people read them, in the forms TF users know.

/// TensorFlow's `HumanReadableNumBytes` (`1023B`, `1.0KiB`, `957.03MiB`), as every report prints sizes.
pub use oomscope_base::size::human as bytes;

/// A count with thousands separators: `1,048,576`.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `part / whole` as a percentage with one decimal (`0.0%` when `whole` is 0).
pub fn percent(part: u64, whole: u64) -> String {
    if whole == 0 { "0.0%".to_string() } else { format!("{:.1}%", part as f64 * 100.0 / whole as f64) }
}

/// An address as TF prints it: `0x7f3c00000000`.
pub fn address(a: u64) -> String {
    format!("{a:#x}")
}

/// Seconds: `0.25s`, `12.5s`, `3m05s`.
pub fn seconds(t: f64) -> String {
    if !t.is_finite() || t < 0.0 {
        return "-".to_string();
    }
    if t < 10.0 {
        format!("{t:.2}s")
    } else if t < 60.0 {
        format!("{t:.1}s")
    } else {
        let m = (t / 60.0).floor();
        format!("{}m{:02}s", m as u64, (t - m * 60.0) as u64)
    }
}

/// `s` cut to `width` characters, with `…` marking the cut (keeps the end of long op names,
/// where the op is, when `keep_end`).
pub fn fit(s: &str, width: usize, keep_end: bool) -> String {
    let n = s.chars().count();
    if n <= width {
        return s.to_string();
    }
    if width == 0 {
        return String::new();
    }
    if keep_end {
        let tail: String = s.chars().skip(n - (width - 1)).collect();
        format!("…{tail}")
    } else {
        let head: String = s.chars().take(width - 1).collect();
        format!("{head}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_cuts() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(1048576), "1,048,576");
        assert_eq!(percent(1, 3), "33.3%");
        assert_eq!(percent(1, 0), "0.0%");
        assert_eq!(fit("shared_model/unet_01/Conv2D", 10, true), "…01/Conv2D");
        assert_eq!(fit("abcdef", 4, false), "abc…");
        assert_eq!(fit("abc", 4, false), "abc");
        assert_eq!(seconds(0.25), "0.25s");
        assert_eq!(seconds(75.0), "1m15s");
    }
}
