//! The training flags of `memplan plan` and `memplan check` (`--training OPTIMIZER` and the
//! step's options) and of `memplan fit MODEL --training` (the step's options), turned into
//! the facade's [`PlanSettings`], which plans the step.

use memplan::estimate::parse_budget;
use memplan::options::PlanSettings;
use memplan::training::{parse_kernel, parse_loss, parse_optimizer};
use memplan_planner::{Loss, Optimizer, OptimizerKernel, UnknownOps};

/// What to do with an op that has no backward rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Unknown {
    /// Refuse the model, naming the op.
    #[default]
    Refuse,
    /// Save all its inputs and outputs for one backward node.
    SaveAll,
}

/// The options of a derived training step shared by `plan`, `check` and `fit`.
#[derive(Debug, Default, clap::Args)]
pub struct StepArgs {
    /// The loss on the model's first output (with --training): cross-entropy against
    /// integer labels, mse against a target, or none (the output's gradient is an input).
    #[arg(long, value_name = "LOSS", value_parser = parse_loss)]
    loss: Option<Loss>,
    /// Update each parameter right after its gradient is complete, in the backward
    /// (PyTorch's optimizer in backward), instead of all after the backward.
    #[arg(long)]
    fused_optimizer: bool,
    /// Gradients accumulate across micro-steps: each is kept in a persistent gradient region
    /// (as ONNX Runtime's training graphs keep them). Without it, a gradient lives in the
    /// arena from the node that makes it to its parameter's update.
    #[arg(long)]
    accumulate: bool,
    /// How the optimizer step runs: `fused` (in place, no temporaries, PyTorch's
    /// `fused=True`; the default for a graph, whose plan is memplan's own engine's step),
    /// `foreach` (`sqrt(exp_avg_sq)` of every parameter at once, PyTorch's default on a GPU;
    /// the default with --config, which answers for PyTorch eager) or `per-tensor` (two
    /// parameter-sized temporaries at a time, `foreach=False`, the default on a CPU). Only
    /// Adam and AdamW have temporaries.
    #[arg(long, value_name = "KERNEL", value_parser = parse_kernel)]
    pub optimizer_kernel: Option<OptimizerKernel>,
    /// What the backward recomputes: `cheap` (default: element-wise ops and views whose
    /// inputs are saved anyway), `none`, `every:N`, `NODE,...` (checkpoints after these
    /// forward nodes) or `auto` (the fewest recomputed FLOPs that fit --budget).
    #[arg(long, value_name = "POLICY")]
    checkpoint: Option<String>,
    /// What to do with an op that has no backward rule.
    #[arg(long, value_enum, value_name = "WHAT")]
    training_unknown: Option<Unknown>,
    /// Float weights that are not trained (name patterns, `*` a wildcard).
    #[arg(long, value_name = "PATTERN", value_delimiter = ',')]
    frozen: Vec<String>,
}

/// `--training` and its options for `plan` and `check`.
#[derive(Debug, Default, clap::Args)]
pub struct TrainingArgs {
    /// Plan a training step of the model (a forward graph) with this optimizer: sgd,
    /// momentum, adam or adamw.
    #[arg(long, value_name = "OPTIMIZER", value_parser = parse_optimizer)]
    training: Option<Optimizer>,
    /// The device memory `--checkpoint auto` must fit (24GiB, 512MiB, bytes).
    #[arg(long, value_parser = parse_budget)]
    budget: Option<u64>,
    /// No f32 master weights for 16-bit parameters.
    #[arg(long)]
    no_master_weights: bool,
    #[command(flatten)]
    step: StepArgs,
}

impl StepArgs {
    /// Puts the step's options into `settings`.
    pub fn apply(&self, settings: &mut PlanSettings) {
        settings.loss = self.loss;
        settings.fused_optimizer = self.fused_optimizer;
        settings.accumulate = self.accumulate;
        settings.optimizer_kernel = self.optimizer_kernel;
        settings.checkpoint.clone_from(&self.checkpoint);
        settings.training_unknown = self.training_unknown.map(|u| match u {
            Unknown::Refuse => UnknownOps::Refuse,
            Unknown::SaveAll => UnknownOps::SaveAll,
        });
        settings.frozen.clone_from(&self.frozen);
    }
}

impl TrainingArgs {
    /// Puts `--training`, its budget, master weights and the step's options into `settings`.
    pub fn apply(&self, settings: &mut PlanSettings) {
        settings.training = self.training;
        settings.budget = self.budget;
        settings.master_weights = !self.no_master_weights;
        self.step.apply(settings);
    }
}
