//! Command-line front end: argument parsing and one module per command. Commands read
//! input, call the library, and print; they hold no allocator logic.

mod args;
mod demo;
mod diff;
mod export;
mod fit;
mod import;
mod job;
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

impl<E: std::error::Error> From<E> for CliError {
    fn from(e: E) -> Self {
        CliError(e.to_string())
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
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("oomscope: error: {}", output::safe(&e.to_string()));
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}
