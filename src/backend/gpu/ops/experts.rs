//! A mixture of experts' two ops of its own beside the matrix kernels' EXPERTS form
//! (matrix.rs, [`LinearOp::experts`](super::LinearOp::experts)): the pick (expert_pick.wgsl),
//! each token's router scores to its experts and their weights, and the sum
//! (expert_sum.wgsl), each token's picks' down projections weighed and added to the residual
//! stream. Their CPU twins are `cpu::experts::route` and `CpuExperts::forward`'s sum
//! (tests/gpu_kernels.rs).

use super::super::device::GpuContext;
use super::super::kernels::{cached, pipeline, prepare, whole, Bind, Dispatch, Kernel, Kernels, ShaderSource, WORKGROUP};
use super::super::params::ExpertParams;
use crate::error::{Error, Result};
use crate::model::config::MAX_EXPERTS;

const EXPERT_PICK: &str = include_str!("../../../../shaders/expert_pick.wgsl");
const EXPERT_SUM: &str = include_str!("../../../../shaders/expert_sum.wgsl");

/// Which of the two kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExpertKernel {
    /// expert_pick.wgsl.
    Pick,
    /// expert_sum.wgsl.
    Sum,
}

impl ExpertKernel {
    /// Both.
    pub const ALL: [ExpertKernel; 2] = [ExpertKernel::Pick, ExpertKernel::Sum];

    /// Its source.
    pub fn source(self) -> ShaderSource {
        match self {
            ExpertKernel::Pick => ShaderSource::new("expert_pick.wgsl", EXPERT_PICK, Vec::new()),
            ExpertKernel::Sum => ShaderSource::new("expert_sum.wgsl", EXPERT_SUM, Vec::new()),
        }
    }
}

/// A layer's routing shape: how many experts, how many a token picks, whether their weights
/// are renormalized.
#[derive(Debug, Clone, Copy)]
pub struct Routing {
    /// Experts in the layer.
    pub count: u32,
    /// Experts each token picks.
    pub used: u32,
    /// The picked probabilities divided by their sum.
    pub normalized: bool,
}

/// The pick's operands: the router's scores in, the picks out.
pub struct ExpertPick<'a> {
    /// The shape.
    pub routing: Routing,
    /// The router's scores, `[n_tokens, count]`.
    pub scores: Bind<'a>,
    /// Each token's picks, `[n_tokens, used, 2]` u32: expert, weight bits.
    pub picks: Bind<'a>,
}

/// The sum's operands: the picks' outputs in, the residual stream added to.
pub struct ExpertSum<'a> {
    /// The shape.
    pub routing: Routing,
    /// The residual stream's width.
    pub dim: u32,
    /// Each token's picks (the pick's output).
    pub picks: Bind<'a>,
    /// Each pick's down projection, `[n_tokens, used, dim]`.
    pub out: Bind<'a>,
    /// The residual stream, `[n_tokens, dim]`.
    pub x: Bind<'a>,
    /// What the weighted sum is multiplied by as it joins `x` (Granite's residual scale; 1
    /// otherwise).
    pub out_scale: f32,
}

/// Checks a routing shape against the kernels' limits.
fn check(r: Routing) -> Result<()> {
    if r.count == 0 || r.count as usize > MAX_EXPERTS || r.used == 0 || r.used > r.count {
        return Err(Error::Backend(format!("{} picks of {} experts: the kernels take 1 to {MAX_EXPERTS} experts", r.used, r.count)));
    }
    Ok(())
}

impl Kernels {
    /// Each token's picks from its router scores (see [`ExpertPick`]): a workgroup a token.
    pub fn expert_pick(&self, ctx: &GpuContext, op: &ExpertPick, step: &wgpu::Buffer) -> Result<Dispatch> {
        let r = op.routing;
        check(r)?;
        if op.scores.bytes() < u64::from(r.count) * 4 || op.picks.bytes() < u64::from(r.used) * 8 {
            return Err(Error::Backend("the router's scores or the picks buffer hold less than one token's".into()));
        }
        let params = ExpertParams { count: r.count, used: r.used, normalized: r.normalized as u32, ..Default::default() };
        let params = ctx.uniform("expert_pick", &[params]);
        let binds = [("params", whole(&params)), ("scores", op.scores), ("picks", op.picks), ("step", whole(step))];
        let mut d = prepare(ctx, &self.expert_kernel(ctx, ExpertKernel::Pick)?, &binds, 1)?;
        d.groups = [1, 1, 1];
        Ok(d.per_token(2, 1))
    }

    /// `x += out_scale * sum_k w_k out[k]` for each token (see [`ExpertSum`]): a thread per
    /// row and token.
    pub fn expert_sum(&self, ctx: &GpuContext, op: &ExpertSum, step: &wgpu::Buffer) -> Result<Dispatch> {
        let r = op.routing;
        check(r)?;
        let row = u64::from(op.dim) * 4;
        if op.dim == 0 || op.out.bytes() < row * u64::from(r.used) || op.x.bytes() < row || op.picks.bytes() < u64::from(r.used) * 8 {
            return Err(Error::Backend(format!(
                "an expert sum of {} picks of {} rows: a buffer holds less than one token's",
                r.used, op.dim
            )));
        }
        let params = ExpertParams { count: r.count, used: r.used, dim: op.dim, out_scale: op.out_scale, ..Default::default() };
        let params = ctx.uniform("expert_sum", &[params]);
        let binds = [("params", whole(&params)), ("picks", op.picks), ("out", op.out), ("x", op.x), ("step", whole(step))];
        Ok(prepare(ctx, &self.expert_kernel(ctx, ExpertKernel::Sum)?, &binds, op.dim.div_ceil(WORKGROUP))?.per_token(1, 1))
    }

    /// The pick or sum pipeline, compiled the first time it is asked for.
    fn expert_kernel(&self, ctx: &GpuContext, kernel: ExpertKernel) -> Result<Kernel> {
        cached(&self.experts, kernel, || pipeline(ctx, &kernel.source(), &[("WG", WORKGROUP as f64)]))
    }
}
