//! The `oomscope` command. Exit codes: 0 success, 1 an allocation failed (the report was
//! printed), 2 bad input or usage (the message says which file and line, and what to do).

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    cli::main()
}
