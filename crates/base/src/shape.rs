//! Tensor shapes as TensorFlow prints them: `[10000,32,28,28]` (no spaces).

use std::fmt::Write;

/// `[10000,32,28,28]`; `[]` for a scalar.
pub fn text<T: std::fmt::Display>(dims: &[T]) -> String {
    let mut s = String::with_capacity(2 + dims.len() * 4);
    s.push('[');
    for (i, d) in dims.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "{d}");
    }
    s.push(']');
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn shapes_print_as_tf_prints_them() {
        assert_eq!(super::text(&[10000i64, 32, 28, 28]), "[10000,32,28,28]");
        assert_eq!(super::text::<u64>(&[]), "[]");
        assert_eq!(super::text(&[-1i64, 3]), "[-1,3]");
    }
}
