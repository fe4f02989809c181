//! Paths as a shell reads them, for the commands oomscope suggests ("look inside: oomscope tui
//! PATH"): the suggestion must run as printed when pasted, whatever the path holds.

/// A path as a shell reads it back, for a command to type: single-quoted when it holds a
/// blank or a character the shell would take.
pub fn quoted(p: &str) -> String {
    let special = |c: char| {
        c.is_whitespace()
            || matches!(c, '\'' | '"' | '$' | '`' | '\\' | '&' | ';' | '|' | '(' | ')' | '<' | '>' | '*' | '?' | '!')
    };
    if p.chars().any(special) { format!("'{}'", p.replace('\'', "'\\''")) } else { p.to_string() }
}
