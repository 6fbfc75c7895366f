//! The loop and what it drives: token -> text. One generation loop (prefill -> decode ->
//! sample -> append -> stop?) over any backend ([`generate`]), with stop strings across token
//! boundaries ([`stop`]); beam search ([`beam`]) and speculative decoding ([`speculative`])
//! over the same `Backend` trait; a run's branches, steps and export format ([`run`]); and a
//! step seen from inside, attention and the logit lens, recomputed on demand ([`inspect`]).

pub mod beam;
pub mod generate;
pub mod inspect;
pub mod run;
pub mod speculative;
pub mod stop;
