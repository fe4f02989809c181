//! Python pickles written for `oomscope export` (reading them is `oomscope_ingest::pickle`).
//! Writing uses only the opcodes pytorch.org/memory_viz's own unpickler knows (protocol 2, no
//! memo), so what is written opens there and in Python alike.

/// A value to write.
#[derive(Clone, Debug, PartialEq)]
pub enum Out {
    None,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    List(Vec<Out>),
    Tuple(Vec<Out>),
    Dict(Vec<(String, Out)>),
}

/// Items per APPENDS/SETITEMS batch, as Python writes them.
const BATCH: usize = 1000;

/// Writes `value` as a protocol 2 pickle.
pub fn write(value: &Out, w: &mut Vec<u8>) {
    w.extend_from_slice(&[0x80, 2]);
    write_value(value, w);
    w.push(b'.');
}

fn write_str(s: &str, w: &mut Vec<u8>) {
    w.push(b'X');
    w.extend_from_slice(&(s.len() as u32).to_le_bytes());
    w.extend_from_slice(s.as_bytes());
}

fn write_value(value: &Out, w: &mut Vec<u8>) {
    match value {
        Out::None => w.push(b'N'),
        Out::Bool(true) => w.push(0x88),
        Out::Bool(false) => w.push(0x89),
        Out::Int(i) => match *i {
            0..=0xff => w.extend_from_slice(&[b'K', *i as u8]),
            0x100..=0xffff => {
                w.push(b'M');
                w.extend_from_slice(&(*i as u16).to_le_bytes());
            }
            i if i32::try_from(i).is_ok() => {
                w.push(b'J');
                w.extend_from_slice(&(i as i32).to_le_bytes());
            }
            i => {
                // LONG1: the shortest little-endian two's complement.
                let bytes = i.to_le_bytes();
                let mut n = 16;
                while n > 1 {
                    let (last, prev) = (bytes[n - 1], bytes[n - 2]);
                    if (last == 0 && prev & 0x80 == 0) || (last == 0xff && prev & 0x80 != 0) {
                        n -= 1;
                    } else {
                        break;
                    }
                }
                w.extend_from_slice(&[0x8a, n as u8]);
                w.extend_from_slice(&bytes[..n]);
            }
        },
        Out::Float(f) => {
            w.push(b'G');
            w.extend_from_slice(&f.to_be_bytes());
        }
        Out::Str(s) => write_str(s, w),
        Out::List(items) => {
            w.push(b']');
            for batch in items.chunks(BATCH) {
                w.push(b'(');
                for item in batch {
                    write_value(item, w);
                }
                w.push(b'e');
            }
        }
        Out::Tuple(items) => match items.len() {
            0 => w.push(b')'),
            1..=3 => {
                for item in items {
                    write_value(item, w);
                }
                w.push(0x84 + items.len() as u8);
            }
            _ => {
                w.push(b'(');
                for item in items {
                    write_value(item, w);
                }
                w.push(b't');
            }
        },
        Out::Dict(items) => {
            w.push(b'}');
            for batch in items.chunks(BATCH) {
                w.push(b'(');
                for (k, v) in batch {
                    write_str(k, w);
                    write_value(v, w);
                }
                w.push(b'u');
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_reads_back() {
        let v = Out::Dict(vec![
            ("segments".into(), Out::List((0..2500).map(|i| Out::Int(i * 1_000_003)).collect())),
            ("big".into(), Out::Int(1i128 << 64)),
            ("neg".into(), Out::Int(-70000)),
            ("t".into(), Out::Tuple(vec![Out::Int(1), Out::Int(2)])),
            ("t5".into(), Out::Tuple((0..5).map(Out::Int).collect())),
            ("f".into(), Out::Float(1.5)),
            ("s".into(), Out::Str("shared_model/unet_00/Conv2D".into())),
            ("b".into(), Out::Bool(false)),
            ("n".into(), Out::None),
        ]);
        let mut bytes = Vec::new();
        write(&v, &mut bytes);
        let r = oomscope_ingest::pickle::read(&bytes).unwrap();
        assert_eq!(r.get("segments").and_then(|s| s.items()).map(|s| s.len()), Some(2500));
        assert_eq!(r.get("segments").and_then(|s| s.items()).and_then(|s| s[2499].as_i128()), Some(2499 * 1_000_003));
        assert_eq!(r.get("big").and_then(|b| b.as_i128()), Some(1i128 << 64));
        assert_eq!(r.get("neg").and_then(|b| b.as_i128()), Some(-70000));
        assert_eq!(r.get("t5").and_then(|t| t.items()).map(|t| t.len()), Some(5));
        assert_eq!(r.get("f").and_then(|f| f.as_f64()), Some(1.5));
        assert_eq!(
            r.get("s").as_ref().and_then(oomscope_ingest::pickle::Value::as_str),
            Some("shared_model/unet_00/Conv2D")
        );
        assert!(matches!(r.get("n"), Some(oomscope_ingest::pickle::Value::None)));
    }
}
