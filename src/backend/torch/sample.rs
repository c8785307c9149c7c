//! `interpolate` on libtorch: the `upsample_*` operator of its mode and
//! rank, with the sizes and scales core resolved (`vocab::sample`), as
//! `F.interpolate` chooses them in Python.

use super::Raw;
use crate::error::Result;
use crate::vocab::sample::{interp_plan, Mode};
use crate::vocab::Call;

pub fn interpolate(call: &Call, inputs: &[Option<&Raw>]) -> Result<Raw> {
    let Some(x) = inputs.first().copied().flatten() else {
        crate::bail!(E_INTERNAL, "interpolate: core passed no input");
    };
    let p = interp_plan(call, &x.0.size())?;
    let (t, o, s, ac) = (&x.0, p.output.as_slice(), &p.scales, p.align_corners);
    let r = match (p.mode, o.len()) {
        (Mode::Nearest, 1) => t.f_upsample_nearest1d(o, s[0]),
        (Mode::Nearest, 2) => t.f_upsample_nearest2d(o, s[0], s[1]),
        (Mode::Nearest, _) => t.f_upsample_nearest3d(o, s[0], s[1], s[2]),
        (Mode::NearestExact, 1) => t.f_internal_upsample_nearest_exact1d(o, s[0]),
        (Mode::NearestExact, 2) => t.f_internal_upsample_nearest_exact2d(o, s[0], s[1]),
        (Mode::NearestExact, _) => t.f_internal_upsample_nearest_exact3d(o, s[0], s[1], s[2]),
        (Mode::Linear, 1) => t.f_upsample_linear1d(o, ac, s[0]),
        (Mode::Linear, 2) => t.f_upsample_bilinear2d(o, ac, s[0], s[1]),
        (Mode::Linear, _) => t.f_upsample_trilinear3d(o, ac, s[0], s[1], s[2]),
    };
    r.map(Raw).map_err(|e| crate::err!(E_TORCH, "interpolate: {e}"))
}
