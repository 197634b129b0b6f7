//! Options by name: the one place where a planning option is spelled, parsed and turned into
//! the planner's options, for every caller that names options rather than building
//! [`PlanOptions`] itself (the Python package passes its keyword arguments here; the command
//! line fills [`PlanSettings`] from its flags).
//!
//! [`PlanSettings::set`] takes an option's keyword (`schedule`, `inplace`, `checkpoint`) and a
//! [`Value`]; an unknown keyword or a value of the wrong type is an [`ErrorKind::Option`]
//! error naming it, a value out of range an [`ErrorKind::Input`] one with the command line's
//! message. [`PLAN_KEYWORDS`] lists every keyword beside the flag it mirrors; a test of the
//! command line holds the two lists together, so a new flag without a keyword fails it.
//!
//! Adding a planning option: a field of [`PlanSettings`] (with its default), its arm in
//! [`PlanSettings::set`], its row in [`PLAN_KEYWORDS`], its use in
//! [`PlanSettings::plan_options`] or [`PlanSettings::step_options`]; then the flag in the
//! command line's `PlanningArgs` (or `TrainingArgs`) and the keyword in the Python stubs.

use std::path::PathBuf;

use memplan_ir::{OpRule, OpTable};
use memplan_packing::Strategy;
use memplan_planner::{
    AttentionKernel, Fusions, Loss, Optimizer, OptimizerKernel, PlanOptions, ScheduleMode,
    TrainingOptions, UnknownOps,
};

use crate::{Error, ErrorKind, Notes, Result, bail};

/// A value given to an option by name.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// No value: the option's default.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An integer (negative ones too, so that they can be refused by name).
    Int(i128),
    /// A float (fractions: `gpu_util=0.9`).
    Float(f64),
    /// Text.
    Str(String),
    /// A list of texts (`opaque=["Softmax"]`).
    List(Vec<String>),
    /// Names with integer values (`dims={"batch": 8}`).
    Map(Vec<(String, i128)>),
}

impl Value {
    /// What kind of value this is, for an error: `a string`, `a list`.
    pub fn describe(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "a bool",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a float",
            Value::Str(_) => "a string",
            Value::List(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }
}

/// An [`ErrorKind::Option`] error: `option` given `value` where it takes `wants`.
pub fn wrong_type(option: &str, value: &Value, wants: &str) -> Error {
    Error::new(
        ErrorKind::Option,
        format!("option `{option}` takes {wants}, not {}", value.describe()),
    )
}

/// An [`ErrorKind::Option`] error for a keyword `what` does not know, naming the nearest.
pub fn unknown_option(what: &str, name: &str, known: &[&str]) -> Error {
    let near = known
        .iter()
        .map(|k| (edit_distance(k, name), *k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 4) || name.starts_with(k) || k.starts_with(name))
        .min();
    let hint = near.map_or_else(String::new, |(_, k)| format!("; did you mean `{k}`?"));
    Error::new(
        ErrorKind::Option,
        format!(
            "{what} has no option `{name}`{hint} (its options: {})",
            known.join(", ")
        ),
    )
}

/// Levenshtein distance, for suggestions.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut last = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (last + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            last = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// A bool option.
pub fn as_bool(option: &str, value: &Value) -> Result<bool> {
    match value {
        Value::Bool(b) => Ok(*b),
        other => Err(wrong_type(option, other, "True or False")),
    }
}

/// A text option.
pub fn as_str(option: &str, value: &Value) -> Result<String> {
    match value {
        Value::Str(s) => Ok(s.clone()),
        other => Err(wrong_type(option, other, "a string")),
    }
}

/// A list of names: a list, or one string of names separated by commas.
pub fn as_list(option: &str, value: &Value) -> Result<Vec<String>> {
    match value {
        Value::None => Ok(Vec::new()),
        Value::List(items) => Ok(items.clone()),
        Value::Str(s) => Ok(s
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()),
        other => Err(wrong_type(option, other, "a list of names")),
    }
}

/// A non-negative integer option.
pub fn as_count(option: &str, value: &Value) -> Result<u64> {
    match value {
        Value::Int(n) => u64::try_from(*n).map_err(|_| {
            Error::input(if *n < 0 {
                format!("option `{option}` must not be negative, got {n}")
            } else {
                format!("option `{option}` is too large: {n}")
            })
        }),
        other => Err(wrong_type(option, other, "an integer")),
    }
}

/// A size: bytes as an integer, or a string such as `24GiB`, `512MiB`, `24GB` (powers of
/// 1000) or `1048576`; negative sizes are refused.
pub fn as_size(option: &str, value: &Value) -> Result<u64> {
    match value {
        Value::Int(n) if *n < 0 => Err(Error::input(format!(
            "option `{option}` is a size and cannot be negative, got {n}"
        ))),
        Value::Int(_) => as_count(option, value),
        Value::Str(s) if s.trim_start().starts_with('-') => Err(Error::input(format!(
            "option `{option}` is a size and cannot be negative, got `{s}`"
        ))),
        Value::Str(s) => memplan_tracker::parse_size(s)
            .map_err(|e| Error::input(format!("option `{option}`: {e}"))),
        other => Err(wrong_type(
            option,
            other,
            "a size: bytes as an integer or a string such as \"24GiB\"",
        )),
    }
}

/// Symbol values: a mapping of names to integers, or `NAME=VALUE` strings.
pub fn as_dims(option: &str, value: &Value) -> Result<Vec<(String, u64)>> {
    let pairs: Vec<(String, i128)> = match value {
        Value::None => Vec::new(),
        Value::Map(pairs) => pairs.clone(),
        Value::List(items) => {
            let mut out = Vec::new();
            for item in items {
                let (name, v) = crate::load::parse_dim(item).map_err(Error::input)?;
                out.push((name, i128::from(v)));
            }
            out
        }
        other => Err(wrong_type(
            option,
            other,
            "a mapping of symbol names to integers, such as {\"batch\": 8}",
        ))?,
    };
    let mut out = Vec::with_capacity(pairs.len());
    for (name, v) in pairs {
        if name.is_empty() {
            bail!("option `{option}`: a symbol name is empty");
        }
        let v = u64::try_from(v).map_err(|_| {
            Error::input(format!(
                "option `{option}`: {name} = {v} is not a non-negative integer"
            ))
        })?;
        out.push((name, v));
    }
    Ok(out)
}

/// One of `choices`, for an option whose values are names.
pub fn as_choice<T: Copy>(option: &str, value: &Value, choices: &[(&str, T)]) -> Result<T> {
    let text = as_str(option, value)?;
    choices
        .iter()
        .find(|(name, _)| *name == text)
        .map(|(_, v)| *v)
        .ok_or_else(|| {
            Error::input(format!(
                "option `{option}`: `{text}` is not one of {}",
                choices
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
}

/// Every planning option by keyword, beside the command-line flag it mirrors (a `--no-X`
/// flag is the keyword `X` set to false).
pub const PLAN_KEYWORDS: &[(&str, &str)] = &[
    ("dims", "--dim"),
    ("schedule", "--schedule"),
    ("strategy", "--strategy"),
    ("inplace", "--no-inplace"),
    ("views", "--no-views"),
    ("concat_elision", "--no-concat-elision"),
    ("fold_weights", "--no-fold-weights"),
    ("attention", "--attention"),
    ("fuse", "--fuse"),
    ("opaque", "--opaque"),
    ("align", "--align"),
    ("caller_inputs", "--caller-inputs"),
    ("caller_outputs", "--caller-outputs"),
    ("bound", "--bound"),
    ("persistent", "--persistent"),
    ("parameters", "--parameters"),
    ("verify", "--no-verify"),
    ("training", "--training"),
    ("loss", "--loss"),
    ("fused_optimizer", "--fused-optimizer"),
    ("accumulate", "--accumulate"),
    ("optimizer_kernel", "--optimizer-kernel"),
    ("checkpoint", "--checkpoint"),
    ("training_unknown", "--training-unknown"),
    ("frozen", "--frozen"),
    ("budget", "--budget"),
    ("master_weights", "--no-master-weights"),
];

/// Everything `memplan plan` is told about how to plan (not where to write): the graph's
/// symbol values, the planner's options, and a training step's.
#[derive(Clone, Debug)]
pub struct PlanSettings {
    /// Values of shape symbols (`--dim NAME=VALUE`), each name once.
    pub dims: Vec<(String, u64)>,
    /// The execution order: the graph's own, or a memory-aware one.
    pub schedule: ScheduleMode,
    /// The packing strategy.
    pub strategy: Strategy,
    /// Outputs written over dead inputs.
    pub inplace: bool,
    /// View outputs placed inside their inputs.
    pub views: bool,
    /// Producers writing straight into their slice of a Concat's output.
    pub concat_elision: bool,
    /// Tensors computed from weights alone computed once at load.
    pub fold_weights: bool,
    /// The kernel fused attention ops run with.
    pub attention: AttentionKernel,
    /// The fused kernels the engine runs, planned as they run (`--fuse LIST`).
    pub fuse: Fusions,
    /// Ops whose kernels need outputs of their own.
    pub opaque: Vec<String>,
    /// Alignment of every offset (a power of two).
    pub align: u64,
    /// Graph inputs left to the caller.
    pub caller_inputs: bool,
    /// Graph outputs left to the caller.
    pub caller_outputs: bool,
    /// Data-dependent sizes planned at their bounds.
    pub bound: bool,
    /// Graph inputs that are persistent training state (name patterns).
    pub persistent: Vec<String>,
    /// A model whose parameters size an optimizer graph's sequence inputs.
    pub parameters: Option<PathBuf>,
    /// Run the independent plan verifier on the plan (on by default).
    pub verify: bool,
    /// Plan a training step with this optimizer.
    pub training: Option<Optimizer>,
    /// The step's loss (default cross-entropy).
    pub loss: Option<Loss>,
    /// Each update right after its gradient.
    pub fused_optimizer: bool,
    /// Gradients accumulate across micro-steps in a persistent region (otherwise each lives
    /// in the arena from its producer to its update).
    pub accumulate: bool,
    /// How the optimizer step runs (`fused`, `foreach`, `per-tensor`; default fused).
    pub optimizer_kernel: Option<OptimizerKernel>,
    /// The checkpoint policy (`cheap`, `none`, `every:N`, `NODE,...`, `auto`).
    pub checkpoint: Option<String>,
    /// What to do with an op that has no backward rule.
    pub training_unknown: Option<UnknownOps>,
    /// Float weights that are not trained (name patterns).
    pub frozen: Vec<String>,
    /// The device memory `checkpoint="auto"` must fit.
    pub budget: Option<u64>,
    /// f32 master weights for 16-bit parameters.
    pub master_weights: bool,
}

impl Default for PlanSettings {
    fn default() -> PlanSettings {
        PlanSettings {
            dims: Vec::new(),
            schedule: ScheduleMode::Given,
            strategy: Strategy::default(),
            inplace: true,
            views: true,
            concat_elision: true,
            fold_weights: true,
            attention: AttentionKernel::Eager,
            fuse: Fusions::NONE,
            opaque: Vec::new(),
            align: 256,
            caller_inputs: false,
            caller_outputs: false,
            bound: false,
            persistent: Vec::new(),
            parameters: None,
            verify: true,
            training: None,
            loss: None,
            fused_optimizer: false,
            accumulate: false,
            optimizer_kernel: None,
            checkpoint: None,
            training_unknown: None,
            frozen: Vec::new(),
            budget: None,
            master_weights: true,
        }
    }
}

impl PlanSettings {
    /// Sets the option `keyword` (see [`PLAN_KEYWORDS`]); [`Value::None`] sets its default.
    pub fn set(&mut self, keyword: &str, value: &Value) -> Result<()> {
        let defaults = PlanSettings::default();
        let v = value;
        let none = *value == Value::None;
        match keyword {
            "dims" => self.dims = as_dims(keyword, v)?,
            "schedule" if none => self.schedule = defaults.schedule,
            "schedule" => {
                self.schedule = as_choice(
                    keyword,
                    v,
                    &[
                        ("given", ScheduleMode::Given),
                        ("memory", ScheduleMode::Memory),
                    ],
                )?;
            }
            "strategy" if none => self.strategy = defaults.strategy,
            "strategy" => {
                let name = as_str(keyword, v)?;
                self.strategy = name.parse().map_err(|_| {
                    Error::input(format!(
                        "option `strategy`: `{name}` is not one of {}",
                        Strategy::ALL.map(Strategy::name).join(", ")
                    ))
                })?;
            }
            "inplace" => self.inplace = none || as_bool(keyword, v)?,
            "views" => self.views = none || as_bool(keyword, v)?,
            "concat_elision" => self.concat_elision = none || as_bool(keyword, v)?,
            "fold_weights" => self.fold_weights = none || as_bool(keyword, v)?,
            "attention" if none => self.attention = defaults.attention,
            "attention" => {
                self.attention = as_choice(
                    keyword,
                    v,
                    &[
                        ("eager", AttentionKernel::Eager),
                        ("flash", AttentionKernel::Flash),
                    ],
                )?;
            }
            "fuse" if none => self.fuse = defaults.fuse,
            "fuse" => {
                // A list as one string (`"attention,gelu"`, `"all"`) or as names.
                self.fuse = Fusions::parse(&as_list(keyword, v)?.join(","))
                    .map_err(|e| Error::input(format!("option `fuse`: {e}")))?;
            }
            "opaque" => self.opaque = as_list(keyword, v)?,
            "align" if none => self.align = defaults.align,
            "align" => self.align = as_size(keyword, v)?,
            "caller_inputs" => self.caller_inputs = !none && as_bool(keyword, v)?,
            "caller_outputs" => self.caller_outputs = !none && as_bool(keyword, v)?,
            "bound" => self.bound = !none && as_bool(keyword, v)?,
            "persistent" => self.persistent = as_list(keyword, v)?,
            "parameters" if none => self.parameters = None,
            "parameters" => self.parameters = Some(PathBuf::from(as_str(keyword, v)?)),
            "verify" => self.verify = none || as_bool(keyword, v)?,
            "training" if none => self.training = None,
            "training" => {
                self.training = Some(
                    crate::training::parse_optimizer(&as_str(keyword, v)?)
                        .map_err(|e| Error::input(format!("option `training`: {e}")))?,
                );
            }
            "loss" if none => self.loss = None,
            "loss" => {
                self.loss = Some(
                    crate::training::parse_loss(&as_str(keyword, v)?)
                        .map_err(|e| Error::input(format!("option `loss`: {e}")))?,
                );
            }
            "fused_optimizer" => self.fused_optimizer = !none && as_bool(keyword, v)?,
            "accumulate" => self.accumulate = !none && as_bool(keyword, v)?,
            "optimizer_kernel" if none => self.optimizer_kernel = None,
            "optimizer_kernel" => {
                self.optimizer_kernel = Some(
                    crate::training::parse_kernel(&as_str(keyword, v)?)
                        .map_err(|e| Error::input(format!("option `optimizer_kernel`: {e}")))?,
                );
            }
            "checkpoint" => {
                self.checkpoint = match v {
                    Value::None => None,
                    Value::Str(s) => Some(s.clone()),
                    Value::List(nodes) if nodes.is_empty() => {
                        bail!("option `checkpoint`: the list names no node")
                    }
                    Value::List(nodes) => Some(nodes.join(",")),
                    other => Err(wrong_type(
                        keyword,
                        other,
                        "a policy (\"cheap\", \"none\", \"every:N\", \"auto\") or a list of node names",
                    ))?,
                }
            }
            "training_unknown" if none => self.training_unknown = None,
            "training_unknown" => {
                self.training_unknown = Some(as_choice(
                    keyword,
                    v,
                    &[
                        ("refuse", UnknownOps::Refuse),
                        ("save-all", UnknownOps::SaveAll),
                        ("save_all", UnknownOps::SaveAll),
                    ],
                )?);
            }
            "frozen" => self.frozen = as_list(keyword, v)?,
            "budget" if none => self.budget = None,
            "budget" => self.budget = Some(as_size(keyword, v)?),
            "master_weights" => self.master_weights = none || as_bool(keyword, v)?,
            _ => {
                let known: Vec<&str> = PLAN_KEYWORDS.iter().map(|(k, _)| *k).collect();
                return Err(unknown_option("planning", keyword, &known));
            }
        }
        Ok(())
    }

    /// The alignment asked for, checked to be a power of two.
    pub fn alignment(&self) -> Result<u64> {
        if !self.align.is_power_of_two() {
            bail!("--align {} is not a power of two", self.align);
        }
        Ok(self.align)
    }

    /// The planner options these settings ask for (bindings empty: [`crate::load::prepare`]
    /// fills them); notes about `opaque` ops go to `notes`.
    pub fn plan_options(&self, notes: &mut dyn Notes) -> Result<PlanOptions> {
        Ok(PlanOptions::default()
            .with_schedule(self.schedule)
            .with_views(self.views)
            .with_inplace(self.inplace)
            .with_concat_elision(self.concat_elision)
            .with_inputs_in_arena(!self.caller_inputs)
            .with_outputs_in_arena(!self.caller_outputs)
            .with_alignment(self.alignment()?)
            .with_strategy(self.strategy)
            .with_op_table(opaque_table(&self.opaque, notes)?)
            .with_fold_weights(self.fold_weights)
            .with_attention(self.attention)
            .with_fuse(self.fuse))
    }

    /// Whether any training-step option was given without `training`.
    fn step_given(&self) -> bool {
        self.loss.is_some()
            || self.fused_optimizer
            || self.accumulate
            || self.optimizer_kernel.is_some()
            || self.checkpoint.is_some()
            || self.training_unknown.is_some()
            || !self.frozen.is_empty()
    }

    /// The training options for `optimizer`, planned with `plan`; `budget` for `auto`.
    pub fn step_options(
        &self,
        plan: PlanOptions,
        optimizer: Optimizer,
        budget: Option<u64>,
    ) -> Result<TrainingOptions> {
        Ok(TrainingOptions::default()
            .with_plan(plan)
            .with_optimizer(optimizer)
            .with_loss(self.loss.unwrap_or_default())
            .with_fused_optimizer(self.fused_optimizer)
            .with_accumulate(self.accumulate)
            .with_optimizer_kernel(self.optimizer_kernel.unwrap_or_default())
            .with_checkpoint(match &self.checkpoint {
                Some(c) => crate::training::parse_checkpoint(c, budget)?,
                None => memplan_planner::Checkpoint::Cheap,
            })
            .with_unknown_ops(self.training_unknown.unwrap_or(UnknownOps::Refuse))
            .with_master_weights(self.master_weights)
            .with_frozen(self.frozen.clone())
            .with_pointwise_fusion(true))
    }

    /// The training options, when `training` was given; the step options without it are an
    /// error.
    pub fn training_options(&self, plan: &PlanOptions) -> Result<Option<TrainingOptions>> {
        let Some(optimizer) = self.training else {
            if self.step_given() || self.budget.is_some() || !self.master_weights {
                bail!(
                    "--loss, --fused-optimizer, --accumulate, --optimizer-kernel, --checkpoint, --budget, --frozen and --training-unknown go with --training OPTIMIZER"
                );
            }
            return Ok(None);
        };
        if self.budget.is_some() && self.checkpoint.as_deref() != Some("auto") {
            bail!("--budget goes with --checkpoint auto");
        }
        self.step_options(plan.clone(), optimizer, self.budget)
            .map(Some)
    }
}

/// The default op table with `opaque` ops made opaque. An op named in another case than
/// an op the table knows is an error (`softmax` for `Softmax`); an op the table does not
/// know, or already makes opaque, gets a note: it is opaque already, so the option changes
/// nothing.
pub fn opaque_table(opaque: &[String], notes: &mut dyn Notes) -> Result<OpTable> {
    let mut table = OpTable::default();
    let known = OpTable::default();
    for op in opaque {
        if !known.states(op) {
            if let Some(near) = known.ops().into_iter().find(|k| k.eq_ignore_ascii_case(op)) {
                bail!(
                    "--opaque {op}: no op is called `{op}`; op names are case-sensitive: did you mean `{near}`?"
                );
            }
            notes.note(format!(
                "note: --opaque {op}: no memory rule is known for `{op}`, so it is opaque already (op names are case-sensitive, as in the graph)"
            ));
        } else if *known.rule(op) == OpRule::Opaque {
            notes.note(format!(
                "note: --opaque {op}: `{op}` always needs outputs of its own already"
            ));
        }
        table.insert(op, OpRule::Opaque);
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_keyword_is_accepted_and_no_other() {
        for (keyword, _) in PLAN_KEYWORDS {
            let mut s = PlanSettings::default();
            s.set(keyword, &Value::None)
                .unwrap_or_else(|e| panic!("{keyword}: {}", e.report()));
        }
        let err = PlanSettings::default()
            .set("shedule", &Value::Str("memory".into()))
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Option);
        assert!(
            err.report().contains("did you mean `schedule`?"),
            "{}",
            err.report()
        );
    }

    #[test]
    fn sizes_take_units_and_refuse_negatives() {
        let mut s = PlanSettings::default();
        s.set("budget", &Value::Str("24GiB".into())).unwrap();
        assert_eq!(s.budget, Some(24 << 30));
        s.set("budget", &Value::Int(1000)).unwrap();
        assert_eq!(s.budget, Some(1000));
        let err = s.set("budget", &Value::Int(-1)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Input);
        assert!(err.report().contains("cannot be negative"));
        let err = s.set("budget", &Value::Str("-1GiB".into())).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Input);
        let err = s.set("align", &Value::List(vec![])).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Option);
    }

    #[test]
    fn negative_flags_are_positive_keywords() {
        let mut s = PlanSettings::default();
        s.set("inplace", &Value::Bool(false)).unwrap();
        s.set("dims", &Value::Map(vec![("batch".into(), 8)]))
            .unwrap();
        assert!(!s.inplace && s.views);
        assert_eq!(s.dims, vec![("batch".to_owned(), 8)]);
        let err = s
            .set("dims", &Value::Map(vec![("batch".into(), -2)]))
            .unwrap_err();
        assert!(err.report().contains("batch = -2"), "{}", err.report());
    }
}
