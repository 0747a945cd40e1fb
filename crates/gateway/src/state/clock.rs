//! The time breakers read. Real in production; a manual clock lets tests step through open
//! windows deterministically while requests still travel over real sockets (paused tokio time
//! would also pause the sockets' timeouts).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone, Default)]
pub struct Clock {
    manual: Option<Arc<Manual>>,
}

struct Manual {
    base: Instant,
    offset_nanos: AtomicU64,
}

impl Clock {
    pub fn real() -> Clock {
        Clock { manual: None }
    }

    /// A clock that only moves when [`Clock::advance`] is called.
    pub fn manual() -> Clock {
        Clock {
            manual: Some(Arc::new(Manual {
                base: Instant::now(),
                offset_nanos: AtomicU64::new(0),
            })),
        }
    }

    pub fn now(&self) -> Instant {
        match &self.manual {
            None => Instant::now(),
            Some(m) => m.base + Duration::from_nanos(m.offset_nanos.load(Ordering::Relaxed)),
        }
    }

    /// Moves a manual clock forward (no effect on the real clock).
    pub fn advance(&self, d: Duration) {
        if let Some(m) = &self.manual {
            let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
            m.offset_nanos.fetch_add(nanos, Ordering::Relaxed);
        }
    }
}
