//! Stop strings that may span token boundaries.
//!
//! Streamed text passes through [`StopMatcher`]: text that could still be the start of a
//! stop string is held back; when a stop string completes, the text before it is released
//! and the stop string itself never is; at the end, held text is flushed.

/// Most stop strings a generation accepts.
pub const MAX_STOP_STRINGS: usize = 4;

/// Watches the generated text for stop strings.
#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
}

/// What to do after a piece of text was pushed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopCheck {
    /// Text that is safe to show now.
    pub emit: String,
    /// Whether a stop string completed (generation must end).
    pub stopped: bool,
}

impl StopMatcher {
    /// A matcher for the given (non-empty) stop strings.
    pub fn new(stops: &[String]) -> Self {
        StopMatcher { stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(), held: String::new() }
    }

    /// Adds newly decoded text.
    pub fn push(&mut self, text: &str) -> StopCheck {
        self.held.push_str(text);
        let earliest = self.stops.iter().filter_map(|s| self.held.find(s.as_str())).min();
        if let Some(at) = earliest {
            let emit = self.held[..at].to_string();
            self.held.clear();
            return StopCheck { emit, stopped: true };
        }
        let keep = self.longest_partial_suffix();
        let cut = self.held.len() - keep;
        let emit = self.held[..cut].to_string();
        self.held.drain(..cut);
        StopCheck { emit, stopped: false }
    }

    /// Releases the held text when generation ends for another reason.
    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Length in bytes of the longest suffix of the held text that begins a stop string.
    fn longest_partial_suffix(&self) -> usize {
        self.held
            .char_indices()
            .map(|(i, _)| i)
            .find(|&i| {
                let tail = &self.held[i..];
                self.stops.iter().any(|s| s.starts_with(tail))
            })
            .map_or(0, |i| self.held.len() - i)
    }
}
