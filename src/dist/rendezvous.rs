//! Where the ranks meet, read as torchrun and `torch.distributed`'s `env://`,
//! `tcp://` and `file://` init methods read it: RANK, WORLD_SIZE,
//! LOCAL_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE,
//! TORCHELASTIC_RESTART_COUNT and GLOO_SOCKET_IFNAME.

use std::net::{ToSocketAddrs, UdpSocket};
use std::time::Duration;

use crate::error::Result;
pub use crate::vocab::dist::{Plan, Store};

/// The most ranks a group (or a ranked checkpoint) may have. Gloo allocates
/// per-peer state for the whole world when a group is created (16 GiB for a
/// world of 2^31, found by the fuzzer), so an absurd integer must be refused
/// before any rendezvous.
pub const MAX_WORLD: i64 = 1 << 20;

/// PyTorch's default process-group timeout (`default_pg_timeout`, 30 minutes).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// The environment, injectable for tests.
pub trait Env {
    fn get(&self, key: &str) -> Option<String>;
}

pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn get(&self, key: &str) -> Option<String> {
        std::env::var(key).ok().filter(|v| !v.is_empty())
    }
}

fn env_int(env: &dyn Env, key: &str) -> Result<Option<i64>> {
    env.get(key)
        .map(|v| v.trim().parse::<i64>().map_err(|_| crate::err!(E_INVALID_ARG, "{key}={v:?} is not an integer")))
        .transpose()
}

/// Checks `rank` of `world` and that torchrun's RANK / WORLD_SIZE, when set, agree.
pub fn check_world(env: &dyn Env, world: i64, rank: i64) -> Result<()> {
    if world < 1 || !(0..world).contains(&rank) {
        crate::bail!(E_INVALID_ARG, "rank {rank} is not in a world of {world}");
    }
    if world > MAX_WORLD {
        crate::bail!(E_INVALID_ARG, "a world of {world} ranks is larger than the limit of {MAX_WORLD}");
    }
    for (key, given) in [("WORLD_SIZE", world), ("RANK", rank)] {
        if let Some(v) = env_int(env, key)? {
            if v != given {
                crate::bail!(E_DIST_ENV_MISMATCH, "the arguments say world {world} rank {rank}, but the environment has {key}={v}");
            }
        }
    }
    Ok(())
}

/// A `file://` store's file, opened (and created) once before c10d does:
/// c10d's FileStore retries a failing open for its default 5 minutes,
/// whatever the group's timeout, so a path that cannot be opened is an
/// error here at once.
pub fn open_store_file(plan: &Plan) -> Result<()> {
    if let Store::File { path } = &plan.store {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| crate::err!(E_DIST, "init: cannot open the file:// store {path:?}: {e}"))?;
    }
    Ok(())
}

/// The timeout: the argument when it is > 0, else ENKAI_DIST_TIMEOUT_S, else PyTorch's 30 minutes.
pub fn timeout(env: &dyn Env, seconds: f64) -> Result<Duration> {
    let from = |s: f64, what: &str| -> Result<Duration> {
        // At least a millisecond; at most a day keeps every deadline representable.
        if !(s.is_finite() && (0.001..=86_400.0).contains(&s)) {
            crate::bail!(E_INVALID_ARG, "{what} must be between 0.001 and 86400 seconds, got {s}");
        }
        Ok(Duration::from_secs_f64(s))
    };
    if seconds.is_nan() || seconds > 0.0 {
        return from(seconds, "timeout");
    }
    match env.get("ENKAI_DIST_TIMEOUT_S") {
        Some(v) => from(
            v.trim().parse().map_err(|_| crate::err!(E_INVALID_ARG, "ENKAI_DIST_TIMEOUT_S={v:?} is not a number"))?,
            "ENKAI_DIST_TIMEOUT_S",
        ),
        None => Ok(DEFAULT_TIMEOUT),
    }
}

/// The plan for `world`/`rank` under `init_method` (`env://` when empty: the
/// ENKAI_DIST_INIT_METHOD variable, else torchrun's environment).
pub fn plan(env: &dyn Env, init_method: &str, world: i64, rank: i64, timeout: Duration, generation: u64) -> Result<Plan> {
    check_world(env, world, rank)?;
    let method = match init_method {
        "" => env.get("ENKAI_DIST_INIT_METHOD").unwrap_or_else(|| "env://".into()),
        m => m.to_string(),
    };
    let mut prefix = String::new();
    let store = if method == "env://" {
        let host = env.get("MASTER_ADDR").ok_or_else(|| {
            crate::err!(E_DIST, "MASTER_ADDR is not set: launch with torchrun, set MASTER_ADDR and MASTER_PORT, or use a file:// init method")
        })?;
        let port = env.get("MASTER_PORT").ok_or_else(|| crate::err!(E_DIST, "MASTER_PORT is not set (MASTER_ADDR is {host:?})"))?;
        let port = parse_port(&port, "MASTER_PORT")?;
        // torchrun's agent hosts the store and keeps it across restarts, so
        // every rank is a client and keys live under the attempt, as in
        // torch.distributed.rendezvous._create_c10d_store.
        let agent = env.get("TORCHELASTIC_USE_AGENT_STORE").as_deref() == Some("True");
        if agent {
            let attempt = env.get("TORCHELASTIC_RESTART_COUNT").unwrap_or_else(|| "0".into());
            prefix = format!("/worker/attempt_{attempt}/");
        }
        Store::Tcp { host, port, server: !agent && rank == 0 }
    } else if let Some(addr) = method.strip_prefix("tcp://") {
        let (host, port) = addr
            .rsplit_once(':')
            .ok_or_else(|| crate::err!(E_INVALID_ARG, "init method {method:?} has no port (tcp://host:port)"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            crate::bail!(E_INVALID_ARG, "init method {method:?} has no host");
        }
        Store::Tcp { host: host.to_string(), port: parse_port(port, "the init method's port")?, server: rank == 0 }
    } else if let Some(path) = method.strip_prefix("file://") {
        if path.is_empty() {
            crate::bail!(E_INVALID_ARG, "init method {method:?} has no path (file:///path/to/file)");
        }
        Store::File { path: path.to_string() }
    } else {
        crate::bail!(E_INVALID_ARG, "unknown init method {method:?} (expected env://, tcp://host:port or file:///path)");
    };
    prefix.push_str(&format!("enkai/pg{generation}/"));
    let interfaces: Vec<String> = env
        .get("GLOO_SOCKET_IFNAME")
        .map(|v| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect())
        .unwrap_or_default();
    let bind_host = match &store {
        Store::Tcp { host, port, .. } if interfaces.is_empty() => route_to(host, *port)?,
        _ => "127.0.0.1".into(),
    };
    Ok(Plan { world, rank, store, prefix, timeout, interfaces, bind_host })
}

fn parse_port(v: &str, what: &str) -> Result<u16> {
    match v.trim().parse::<u16>() {
        Ok(p) if p > 0 => Ok(p),
        _ => crate::bail!(E_INVALID_ARG, "{what} {v:?} is not a port (1-65535)"),
    }
}

/// The local address the kernel would send from to reach `host:port` (a UDP
/// "connect" sends nothing), so Gloo listens where the master can reach us
/// even when this machine's hostname does not resolve.
fn route_to(host: &str, port: u16) -> Result<String> {
    let target = (host, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| crate::err!(E_DIST, "MASTER_ADDR {host:?} does not resolve"))?;
    let any = if target.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
    let local = UdpSocket::bind(any)
        .and_then(|s| s.connect(target).and_then(|()| s.local_addr()))
        .map_err(|e| crate::err!(E_DIST, "no route from this host to the master {target}: {e}"))?;
    Ok(local.ip().to_string())
}

/// LOCAL_RANK, 0 when unset.
pub fn local_rank(env: &dyn Env) -> Result<i64> {
    Ok(env_int(env, "LOCAL_RANK")?.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct Map(HashMap<&'static str, &'static str>);
    impl Env for Map {
        fn get(&self, key: &str) -> Option<String> {
            self.0.get(key).map(|v| v.to_string())
        }
    }
    fn env(pairs: &[(&'static str, &'static str)]) -> Map {
        Map(pairs.iter().copied().collect())
    }
    const T: Duration = Duration::from_secs(5);

    #[test]
    fn torchrun_agent_store_makes_every_rank_a_client_under_the_attempt_prefix() {
        let e = env(&[
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29511"),
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("TORCHELASTIC_USE_AGENT_STORE", "True"),
            ("TORCHELASTIC_RESTART_COUNT", "3"),
        ]);
        let p = plan(&e, "", 2, 0, T, 0).unwrap();
        assert_eq!(p.store, Store::Tcp { host: "127.0.0.1".into(), port: 29511, server: false });
        assert_eq!(p.prefix, "/worker/attempt_3/enkai/pg0/");
        assert_eq!(p.bind_host, "127.0.0.1");
    }

    #[test]
    fn without_the_agent_rank_zero_hosts_the_store() {
        let e = env(&[("MASTER_ADDR", "localhost"), ("MASTER_PORT", "29512")]);
        assert!(matches!(plan(&e, "", 2, 0, T, 1).unwrap().store, Store::Tcp { server: true, .. }));
        let p = plan(&e, "", 2, 1, T, 1).unwrap();
        assert!(matches!(p.store, Store::Tcp { server: false, .. }));
        assert_eq!(p.prefix, "enkai/pg1/");
    }

    #[test]
    fn environment_disagreeing_with_the_arguments_is_its_own_error() {
        let e = env(&[("RANK", "1"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "1")]);
        assert_eq!(plan(&e, "", 2, 0, T, 0).unwrap_err().code, crate::Code::E_DIST_ENV_MISMATCH);
        assert_eq!(plan(&e, "", 4, 1, T, 0).unwrap_err().code, crate::Code::E_DIST_ENV_MISMATCH);
        assert_eq!(plan(&e, "", 2, 2, T, 0).unwrap_err().code, crate::Code::E_INVALID_ARG);
        let e = env(&[("RANK", "x")]);
        assert_eq!(check_world(&e, 2, 0).unwrap_err().code, crate::Code::E_INVALID_ARG);
        // found by the fuzzer: gloo sized per-peer state for 2^31 ranks before any rendezvous
        let e = check_world(&env(&[]), i64::from(i32::MAX), 0).unwrap_err();
        assert!(e.code == crate::Code::E_INVALID_ARG && e.detail.contains("limit"), "{e}");
        assert!(check_world(&env(&[]), MAX_WORLD, 0).is_ok());
    }

    /// c10d's FileStore would retry this open for 5 minutes (found by the fuzzer).
    #[test]
    fn a_file_store_that_cannot_be_opened_fails_at_once() {
        let p = plan(&env(&[]), "file:///nonexistent-enkai-dir/store", 2, 0, T, 0).unwrap();
        let e = open_store_file(&p).unwrap_err();
        assert!(e.code == crate::Code::E_DIST && e.detail.contains("nonexistent-enkai-dir"), "{e}");
    }

    #[test]
    fn init_methods() {
        let e = env(&[("GLOO_SOCKET_IFNAME", "lo, eth0")]);
        let p = plan(&e, "file:///tmp/x", 2, 1, T, 0).unwrap();
        assert_eq!(p.store, Store::File { path: "/tmp/x".into() });
        assert_eq!(p.interfaces, ["lo", "eth0"]);
        let p = plan(&env(&[]), "tcp://127.0.0.1:4000", 2, 0, T, 0).unwrap();
        assert_eq!(p.store, Store::Tcp { host: "127.0.0.1".into(), port: 4000, server: true });
        for bad in ["tcp://127.0.0.1", "tcp://:80", "tcp://h:0", "file://", "udp://x", "env:/"] {
            assert_eq!(plan(&env(&[]), bad, 2, 0, T, 0).unwrap_err().code, crate::Code::E_INVALID_ARG, "{bad}");
        }
        assert_eq!(plan(&env(&[]), "env://", 2, 0, T, 0).unwrap_err().code, crate::Code::E_DIST);
        let e = env(&[("ENKAI_DIST_INIT_METHOD", "file:///tmp/y")]);
        assert_eq!(plan(&e, "", 2, 0, T, 0).unwrap().store, Store::File { path: "/tmp/y".into() });
    }

    #[test]
    fn timeouts() {
        assert_eq!(timeout(&env(&[]), 0.0).unwrap(), DEFAULT_TIMEOUT);
        assert_eq!(timeout(&env(&[("ENKAI_DIST_TIMEOUT_S", "3")]), 0.0).unwrap(), Duration::from_secs(3));
        assert_eq!(timeout(&env(&[("ENKAI_DIST_TIMEOUT_S", "3")]), 1.5).unwrap(), Duration::from_millis(1500));
        for bad in [f64::NAN, f64::INFINITY, 1e9] {
            assert_eq!(timeout(&env(&[]), bad).unwrap_err().code, crate::Code::E_INVALID_ARG);
        }
        assert_eq!(timeout(&env(&[("ENKAI_DIST_TIMEOUT_S", "soon")]), 0.0).unwrap_err().code, crate::Code::E_INVALID_ARG);
    }
}
