//! Figures an out-of-memory message gives in words of no format oomscope knows by name:
//! `requested 512 MB, free 100 MB, total 8 GB`, `Need 8.0GB but only 6.0GB available`,
//! `failed to allocate buffer of size 4096.00 MiB`. Each figure takes its role from the words
//! nearest it (before it first, then the two after it), as a person reads them; a figure no
//! word names (`allocated 3 GiB`, whose role differs by runtime) is left out rather than
//! guessed.

use oomscope_base::size::parse_figure;

/// What a figure is, by the words beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// What a whole load needs (`requires 24 GB`, `Need 8.0GB`): a budget, not one allocation.
    Need,
    /// One allocation's size (`requested 512 MB`, `buffer of size 4096.00 MiB`).
    Request,
    /// What the device had left (`free 100 MB`, `only 6.0GB available`).
    Free,
    /// The device's capacity (`total 8 GB`, `out of 4.0 GB`).
    Total,
}

/// Each figure of `text` that a word names, in order.
pub(crate) fn labelled(text: &str) -> Vec<(Role, u64)> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let bare = |w: &str| w.trim_matches(|c: char| !c.is_alphanumeric()).to_ascii_lowercase();
    // A figure starts at word `i`: one word (`8.0GB`, `size=4096MiB`'s tail) or two (`14.5 GiB,`).
    let figure_at = |i: usize| -> Option<(u64, usize)> {
        let w = words[i].trim_start_matches(['(', '[', '"', '\'', '`', '*']);
        let w = w.rsplit(['=', ':']).next().unwrap_or(w);
        if !w.starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        let unit_glued = w.trim_end_matches(['.', ',', ';', ')', ']', '!', '"', '\'', '`', '*']);
        if unit_glued.ends_with(|c: char| c.is_ascii_alphabetic()) {
            return parse_figure(unit_glued).map(|b| (b, 1));
        }
        let next = words.get(i + 1)?;
        let unit = next.trim_end_matches(['.', ',', ';', ')', ']', '!', '"', '\'', '`', '*', ':']);
        parse_figure(&format!("{unit_glued} {unit}")).map(|b| (b, 2))
    };
    let mut out = Vec::new();
    let mut last_end = 0;
    let mut i = 0;
    while i < words.len() {
        let Some((bytes, len)) = figure_at(i) else {
            i += 1;
            continue;
        };
        // The words before it, nearest first, back to the figure before (at most four), then
        // the two after it. (A word glued to the figure comes first: `size=4096MiB`.)
        let glued = words[i].contains(['=', ':']).then(|| bare(words[i].split(['=', ':']).next().unwrap_or("")));
        let mut before: Vec<String> = glued.into_iter().collect();
        before.extend((last_end.max(i.saturating_sub(4))..i).rev().map(|j| bare(words[j])));
        let mut role = None;
        for (k, w) in before.iter().enumerate() {
            match role_before(w, before.get(k + 1).map(String::as_str)) {
                Word::Role(r) => {
                    role = Some(r);
                    break;
                }
                Word::Stop => break,
                Word::Other => {}
            }
        }
        let after = words.iter().skip(i + len).take(2).map(|w| bare(w));
        let role = role.or_else(|| {
            after.take_while(|w| !w.starts_with(|c: char| c.is_ascii_digit())).find_map(|w| role_after(&w))
        });
        if let Some(role) = role {
            out.push((role, bytes));
        }
        i += len;
        last_end = i;
    }
    out
}

/// What a word before a figure says of it.
enum Word {
    Role(Role),
    /// A role of none of these (`allocated 3 GiB`, `used`): the words farther back are not
    /// this figure's.
    Stop,
    Other,
}

/// What the word `w` says of the figure after it; `farther` is the word before `w`.
fn role_before(w: &str, farther: Option<&str>) -> Word {
    Word::Role(match w {
        "need" | "needs" | "needed" | "require" | "requires" | "required" | "requirement" => Role::Need,
        "requested" | "request" | "requesting" | "allocate" | "allocating" | "allocation" | "size" | "alloc" => {
            Role::Request
        }
        "free" | "available" | "only" | "remaining" | "left" | "avail" => Role::Free,
        "total" | "capacity" => Role::Total,
        // `out of 4.0 GB`, `a total of 8 GB`; not `an allocation of 2 GB`.
        "of" if matches!(farther, Some("out" | "total" | "capacity")) => Role::Total,
        "allocated" | "used" | "reserved" | "cached" | "use" | "holds" | "has" | "peak" => return Word::Stop,
        _ => return Word::Other,
    })
}

/// The role a word gives the figure before it.
fn role_after(w: &str) -> Option<Role> {
    Some(match w {
        "free" | "available" | "left" | "remaining" => Role::Free,
        "total" => Role::Total,
        _ => return None,
    })
}

/// The first figure of `role`.
pub(crate) fn first(figures: &[(Role, u64)], role: Role) -> Option<u64> {
    figures.iter().find(|(r, _)| *r == role).map(|(_, b)| *b)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    #[test]
    fn each_figure_takes_its_role_from_the_nearest_words() {
        let f = labelled("[ERROR] Out of GPU memory: requested 512 MB, free 100 MB, total 8 GB");
        assert_eq!(f, vec![(Role::Request, 512 * MIB), (Role::Free, 100 * MIB), (Role::Total, 8 * GIB)]);
        let f = labelled("RuntimeError: Insufficient VRAM. Need 8.0GB but only 6.0GB available.");
        assert_eq!(f, vec![(Role::Need, 8 * GIB), (Role::Free, 6 * GIB)]);
        let f = labelled("Failed to allocate 3.5 GB of GPU memory. Only 1.5 GB free out of 4.0 GB.");
        assert_eq!(f, vec![(Role::Request, 3 * GIB + GIB / 2), (Role::Free, GIB + GIB / 2), (Role::Total, 4 * GIB)]);
        let f = labelled("failed to allocate buffer of size 4096.00 MiB on device CUDA0");
        assert_eq!(f, vec![(Role::Request, 4 * GIB)]);
        let f = labelled("alloc failed (size=2048MiB)");
        assert_eq!(f, vec![(Role::Request, 2 * GIB)]);
    }

    #[test]
    fn a_figure_no_word_names_is_left_out() {
        assert!(labelled("allocated 3 GiB so far, peak 5 GiB").is_empty());
        assert!(labelled("CUDA error 2 at line 45 of kernel.cu").is_empty());
        // A count of things is no size.
        assert!(labelled("requested 512 tokens, available 100 blocks").is_empty());
    }
}
