//! Waiting for the GPU in a browser without the browser's polling delay (wasm only).
//!
//! A browser's WebGPU learns that submitted work is done by polling its GPU driver: when its
//! GPU process receives commands from the page, and otherwise on a timer (Chromium's GPU
//! process every 2 ms, 1 ms while busy; Firefox's every 100 ms, its bug 1870699). A map asked
//! for before the GPU is done (every decode step's readback) so resolves up to a period late,
//! whatever the GPU took: in a worker, a submit of one trivial dispatch and the map of its
//! result took 2.4 ms (median) in Chromium on SwiftShader and 100 ms in Firefox on lavapipe.
//! An empty submit is a command the GPU process receives and answers with a poll, so while a
//! map (or a wait for submitted work) is pending, [`nudging`] submits nothing now and then.
//! On a hardware adapter it nudges every [`NUDGE_EVERY`] at first, waiting a task at a time
//! between (a MessageChannel message: no timer clamp; the thread is busy, the GPU is not);
//! on a software one, whose "GPU" is the machine's own cores, a busy thread would take one
//! from it (a small model's step on SwiftShader took twice as long so), and it nudges on a
//! timer, every [`SOFTWARE_NUDGE_EVERY`] at least. Either way the gaps grow with the wait to an
//! eighth of it so far, on a timer, so a step of a second costs a few dozen nudges and
//! sleeps between them. The trivial round trip above took 0.5 ms in both browsers so.

use futures_channel::oneshot;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;
use web_time::Instant;

/// The shortest gap between two nudges. Nudging at every task instead (tens of us apart) flooded
/// the GPU process: a round trip's 90th percentile went from 0.6 to 8 ms in Chromium.
pub const NUDGE_EVERY: Duration = Duration::from_micros(250);

/// The shortest gap between two nudges on a software adapter, slept on a timer.
pub const SOFTWARE_NUDGE_EVERY: Duration = Duration::from_millis(1);

/// A wait's gap between nudges is at least this fraction (1 / GAP_SHARE) of the wait so far.
const GAP_SHARE: u32 = 8;

/// Gaps this long or longer are slept on a timer; shorter ones are waited out a task at a time.
const TIMER_FROM: Duration = Duration::from_millis(1);

#[wasm_bindgen]
extern "C" {
    /// The global `setTimeout`, in a window and in a worker alike.
    #[wasm_bindgen(js_name = setTimeout)]
    fn set_timeout(handler: &js_sys::Function, ms: i32) -> JsValue;
}

/// How the engine waits for the GPU in a browser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuWait {
    /// Nudging every [`NUDGE_EVERY`] at first, a task at a time between (a hardware
    /// adapter's default).
    Busy,
    /// Nudging every [`SOFTWARE_NUDGE_EVERY`] at least, on a timer (a software adapter's).
    Timer,
    /// Not nudging: the browser's own poll ends the wait (as before the nudges; for
    /// measuring what they buy).
    Plain,
}

impl GpuWait {
    /// The default for an adapter: [`GpuWait::Timer`] on a software one, else
    /// [`GpuWait::Busy`].
    pub fn for_adapter(software: bool) -> Self {
        if software {
            GpuWait::Timer
        } else {
            GpuWait::Busy
        }
    }

    /// The wait named `name`: "busy", "timer" or "plain" (the page's `?wait=`).
    pub fn named(name: &str) -> crate::error::Result<Self> {
        match name {
            "busy" => Ok(GpuWait::Busy),
            "timer" => Ok(GpuWait::Timer),
            "plain" => Ok(GpuWait::Plain),
            other => Err(crate::error::Error::InvalidParams(format!("a GPU wait is \"busy\", \"timer\" or \"plain\", not {other:?}"))),
        }
    }

    /// The wait in words, for the profile.
    pub fn describe(self) -> &'static str {
        match self {
            GpuWait::Busy => "nudging every 0.25 ms or more, a task at a time between",
            GpuWait::Timer => "nudging every 1 ms or more, on a timer",
            GpuWait::Plain => "not nudging",
        }
    }
}

/// Waits for `done` (a map's or a submitted-work callback's channel), submitting nothing on
/// `queue` now and then so the browser polls for it (see the module's comment), as `how`
/// says. A page where no MessageChannel can be made waits plainly.
pub async fn nudging<T>(queue: &wgpu::Queue, mut done: oneshot::Receiver<T>, how: GpuWait) -> Result<T, oneshot::Canceled> {
    let least = match how {
        GpuWait::Busy => NUDGE_EVERY,
        GpuWait::Timer => SOFTWARE_NUDGE_EVERY,
        GpuWait::Plain => return done.await,
    };
    let Ok(channel) = web_sys::MessageChannel::new() else {
        return done.await;
    };
    let start = Instant::now();
    let mut last = start;
    let result = loop {
        let gap = (start.elapsed() / GAP_SHARE).max(least);
        let wait = if gap < TIMER_FROM {
            next_task(&channel)
        } else {
            // A timer set from a timer's own task is nested, and a browser holds nested ones
            // to 4 ms at least: a task's hop first sets it from a message's task.
            if let Some(result) = first_of(&mut done, next_task(&channel)).await {
                break result;
            }
            sleep(gap)
        };
        if let Some(result) = first_of(&mut done, wait).await {
            break result;
        }
        if last.elapsed() >= gap {
            queue.submit([]);
            last = Instant::now();
        }
    };
    channel.port1().set_onmessage(None);
    result
}

/// Resolves on the next task of this thread's event loop: a message through `channel`.
fn next_task(channel: &web_sys::MessageChannel) -> JsFuture {
    JsFuture::from(js_sys::Promise::new(&mut |resolve, _| {
        channel.port1().set_onmessage(Some(&resolve));
        // A port that cannot post leaves the wait to the map's own resolution (or the next
        // message): it never fails the wait.
        let _ = channel.port2().post_message(&JsValue::NULL);
    }))
}

/// Resolves after `gap`, on a timer.
fn sleep(gap: Duration) -> JsFuture {
    let ms = i32::try_from(gap.as_millis()).unwrap_or(i32::MAX);
    JsFuture::from(js_sys::Promise::new(&mut |resolve, _| {
        set_timeout(&resolve, ms);
    }))
}

/// `done`'s value if it comes first, or None once `wait` resolves.
async fn first_of<T>(done: &mut oneshot::Receiver<T>, mut wait: JsFuture) -> Option<Result<T, oneshot::Canceled>> {
    poll_fn(move |cx| {
        if let Poll::Ready(result) = Pin::new(&mut *done).poll(cx) {
            return Poll::Ready(Some(result));
        }
        if Pin::new(&mut wait).poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        Poll::Pending
    })
    .await
}
