//! A progress bar for long commands, on standard error: drawn only when standard error is a
//! terminal and only once the work has run for a second, so short runs, pipes and CI logs
//! stay silent (and `--quiet` silences it); cleared when the work ends.

use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How long work runs before its bar appears.
const DELAY: Duration = Duration::from_secs(1);

/// A bar over `len` units of work.
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
    started: Instant,
    terminal: bool,
    shown: bool,
}

impl Progress {
    /// A bar for `len` units of `what` (e.g. `steps`), hidden until it is worth showing.
    pub fn new(len: u64, what: &str) -> Progress {
        let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::hidden());
        let template = format!("{{elapsed_precise}} [{{bar:40}}] {{pos}}/{{len}} {what}");
        if let Ok(style) = ProgressStyle::with_template(&template) {
            bar.set_style(style.progress_chars("=> "));
        }
        Progress {
            bar,
            started: Instant::now(),
            terminal: std::io::stderr().is_terminal() && !crate::ui::quiet(),
            shown: false,
        }
    }

    /// `done` units are done.
    pub fn set(&mut self, done: u64) {
        if !self.shown && self.terminal && self.started.elapsed() >= DELAY {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
            self.shown = true;
        }
        self.bar.set_position(done);
    }

    /// Clears the bar.
    pub fn finish(self) {
        self.bar.finish_and_clear();
    }
}

/// A spinner for work whose length is not known (a search, a fit), with the elapsed time:
/// drawn from a second on, only on a terminal and without `--quiet`.
#[derive(Debug)]
pub struct Spinner {
    bar: ProgressBar,
}

impl Spinner {
    /// A spinner saying `what` (e.g. `fitting batch`).
    pub fn new(what: &str) -> Spinner {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
        let template = format!("{{spinner}} {what} ({{elapsed}})");
        if let Ok(style) = ProgressStyle::with_template(&template) {
            bar.set_style(style);
        }
        if std::io::stderr().is_terminal() && !crate::ui::quiet() {
            let shown = bar.clone();
            std::thread::spawn(move || {
                std::thread::sleep(DELAY);
                if !shown.is_finished() {
                    shown.set_draw_target(ProgressDrawTarget::stderr());
                    shown.enable_steady_tick(Duration::from_millis(120));
                }
            });
        }
        Spinner { bar }
    }

    /// Clears the spinner.
    pub fn finish(self) {
        self.bar.finish_and_clear();
    }
}
