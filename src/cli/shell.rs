//! `oomscope completions SHELL` and `oomscope man [COMMAND]`: generated from the argument
//! definitions themselves (`args.rs`), so they cannot drift from `--help`.

use super::args::{Cli, CompletionsArgs, ManArgs};
use super::{CliError, output};
use clap::CommandFactory;

pub fn completions(a: CompletionsArgs) -> Result<u8, CliError> {
    let mut cmd = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "oomscope", &mut script);
    output::print(&String::from_utf8_lossy(&script))?;
    Ok(0)
}

pub fn man(a: ManArgs) -> Result<u8, CliError> {
    let mut cmd = Cli::command();
    // Building fills in what the page shows of a command: its full name (`oomscope run`),
    // the version and the help flags.
    cmd.build();
    let page = match &a.command {
        None => cmd,
        Some(name) => {
            let names: Vec<&str> = cmd.get_subcommands().map(|c| c.get_name()).filter(|n| *n != "help").collect();
            let names = names.join(", ");
            cmd.find_subcommand(name)
                .cloned()
                .ok_or_else(|| CliError(format!("{name:?} is not an oomscope command; one of {names}")))?
        }
    };
    let mut roff = Vec::new();
    // A command's page would say "run 0.1.0" in its footer: the program is oomscope.
    let source = format!("oomscope {}", env!("CARGO_PKG_VERSION"));
    clap_mangen::Man::new(page).source(source).render(&mut roff)?;
    output::print(&String::from_utf8_lossy(&roff))?;
    Ok(0)
}
