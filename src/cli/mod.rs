//! Command-line front end: argument parsing and one module per command. Commands read
//! input, call the library, and print; they hold no allocator logic.

mod args;
mod demo;
mod diff;
mod export;
mod fit;
mod fit_command;
mod import;

mod output;
mod replay;
mod replay_snapshot;
mod report;
mod run;
mod shell;
mod tui;

use args::{Cli, Command};
use clap::Parser;
use std::fmt;
use std::process::ExitCode;

/// Exit code when an allocation failed and the report was printed.
pub const EXIT_OOM: u8 = 1;
/// Exit code for bad input, bad usage, or an environment error.
pub const EXIT_BAD_INPUT: u8 = 2;
/// Exit code when Ctrl-C ended the terminal UI: what a shell reports for a program SIGINT
/// ended (128 + 2), though the UI reads Ctrl-C as a key in raw mode.
pub const EXIT_INTERRUPTED: u8 = 130;

/// A command's failure: what to tell the user.
#[derive(Debug)]
pub struct CliError(pub String);

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A library error, with every cause in its chain that its own words do not already say
/// (`a.json: cannot write: permission denied`), so that nothing of why is lost on the way
/// to the user.
impl<E: std::error::Error> From<E> for CliError {
    fn from(e: E) -> Self {
        let mut text = e.to_string();
        let mut cause = e.source();
        while let Some(c) = cause {
            let said = c.to_string();
            if !text.contains(&said) {
                text.push_str(": ");
                text.push_str(&said);
            }
            cause = c.source();
        }
        CliError(text)
    }
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    oomscope_tui::term::set_color(output::set_color(cli.color));
    let result = match cli.command {
        Command::Demo(a) => demo::run(a),
        Command::Fit(a) => fit::run(a),
        Command::Export(a) => export::run(a),
        Command::Diff(a) => diff::run(a),
        Command::Import(a) => import::run(a),
        Command::Replay(a) => replay::run(a),
        Command::Report(a) => report::run(a),
        Command::Run(a) => run::run(a),
        Command::Tui(a) => tui::run(a),
        Command::Completions(a) => shell::completions(a),
        Command::Man(a) => shell::man(a),
        Command::CheckSettings => oomscope_core::config::Config::from_vars(|k| std::env::var(k).ok())
            .map(|_| 0)
            .map_err(|e| CliError(e.to_string())),
        Command::Load { path } => load(&path),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("oomscope: error: {}", output::safe(&e.to_string()));
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}

/// `oomscope load FILE`: the dump and its summary, in one JSON object.
fn load(path: &std::path::Path) -> Result<u8, CliError> {
    let d = oomscope_inputs::load(path)?;
    let json = oomscope_report::render(&d, oomscope_report::Format::Json);
    let text = oomscope_report::render(&d, oomscope_report::Format::Summary);
    let text = serde_json::to_string(&text).map_err(|e| CliError(e.to_string()))?;
    output::print(&format!("{{\"dump\":{},\"text\":{text}}}\n", json.trim_end()))?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Outer(std::io::Error, bool);

    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            if self.1 { write!(f, "a.json: {}", self.0) } else { f.write_str("a.json: cannot write the dump") }
        }
    }

    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_library_errors_causes_reach_the_user_once() {
        let denied = || std::io::Error::new(std::io::ErrorKind::PermissionDenied, "permission denied");
        assert_eq!(CliError::from(Outer(denied(), false)).0, "a.json: cannot write the dump: permission denied");
        assert_eq!(CliError::from(Outer(denied(), true)).0, "a.json: permission denied", "said once");
    }
}
