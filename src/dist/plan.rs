//! What every rank must compute identically before a collective: the bucket
//! layout of a tensor list and a signature of the call, compared across
//! ranks so that a mismatch is an error instead of a silent mix of
//! unrelated buffers (or a hang).

use crate::device::Device;
use crate::dtype::DType;

/// One tensor of a collective as the plan sees it: `numel` is `None` for an
/// entry that takes no part (a parameter without a gradient).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub dtype: DType,
    pub device: Device,
    pub numel: Option<usize>,
}

/// DDP's default `bucket_cap_mb`.
pub const DEFAULT_BUCKET_BYTES: usize = 25 << 20;

/// Groups entries into buckets of one dtype and device, in list order, each
/// closed once it holds `cap` bytes or more (so a tensor larger than `cap`
/// gets a bucket of its own), as DDP's `bucket_cap_mb` does. Entries without
/// a numel are left out. Returns indices into `entries`.
pub fn buckets(entries: &[Entry], cap: usize) -> Vec<Vec<usize>> {
    let mut open: Vec<((DType, Device), Vec<usize>, usize)> = Vec::new();
    let mut done = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let Some(n) = e.numel else { continue };
        let key = (e.dtype, e.device);
        let at = match open.iter().position(|(k, _, _)| *k == key) {
            Some(at) => at,
            None => {
                open.push((key, Vec::new(), 0));
                open.len() - 1
            }
        };
        let bucket = &mut open[at];
        bucket.1.push(i);
        bucket.2 += n * e.dtype.size();
        if bucket.2 >= cap {
            done.push(open.remove(at).1);
        }
    }
    done.extend(open.into_iter().map(|(_, b, _)| b));
    done
}

/// A 62-bit FNV-1a hash of the call: its name, settings and every entry's
/// dtype, device and numel, in order. 62 bits so that it and its negation
/// fit in an int64 tensor (the check all-reduces min(sig) and min(-sig)).
pub fn signature(call: &str, settings: &[i64], entries: &[Entry]) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    eat(call.as_bytes());
    for s in settings {
        eat(&s.to_le_bytes());
    }
    for e in entries {
        eat(e.dtype.name().as_bytes());
        let dev = match e.device {
            Device::Cpu => -1,
            Device::Cuda(n) => i64::from(n),
        };
        eat(&dev.to_le_bytes());
        eat(&e.numel.map_or(-1, |n| n as i64).to_le_bytes());
    }
    (h >> 2) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(dtype: DType, numel: usize) -> Entry {
        Entry { dtype, device: Device::Cpu, numel: Some(numel) }
    }

    #[test]
    fn buckets_split_by_dtype_and_close_at_the_cap() {
        let entries =
            [e(DType::F32, 10), e(DType::F64, 3), e(DType::F32, 20), Entry { numel: None, ..e(DType::F32, 0) }, e(DType::F32, 5)];
        // f32: 40 + 80 bytes reach the cap and close [0, 2]; entry 4 opens a new f32 bucket
        // after the still-open f64 one.
        assert_eq!(buckets(&entries, 100), vec![vec![0, 2], vec![1], vec![4]]);
        assert_eq!(buckets(&entries, DEFAULT_BUCKET_BYTES), vec![vec![0, 2, 4], vec![1]]);
        assert_eq!(buckets(&entries, 1), vec![vec![0], vec![1], vec![2], vec![4]]);
        assert!(buckets(&[], 1).is_empty());
    }

    #[test]
    fn signature_sees_every_difference() {
        let a = [e(DType::F32, 4), e(DType::I64, 2)];
        let s = signature("allreduce", &[0], &a);
        assert!((0..(1 << 62)).contains(&s));
        assert_eq!(s, signature("allreduce", &[0], &a));
        assert_ne!(s, signature("allreduce", &[1], &a));
        assert_ne!(s, signature("broadcast", &[0], &a));
        assert_ne!(s, signature("allreduce", &[0], &[e(DType::F32, 4), e(DType::I64, 3)]));
        assert_ne!(s, signature("allreduce", &[0], &[e(DType::I64, 2), e(DType::F32, 4)]));
        assert_ne!(s, signature("allreduce", &[0], &[e(DType::F32, 4), Entry { numel: None, ..e(DType::I64, 2) }]));
    }
}
