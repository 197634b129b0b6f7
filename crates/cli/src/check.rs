//! Placeholder until this subcommand lands.

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("this subcommand is not available yet")
}
