//! One input: a GGUF file's bytes. Reading it must never panic, whatever the bytes, our header
//! walk and candle's parse must agree wherever both read the header, and the
//! header check the page runs before it frees the model in use must refuse exactly what the
//! full read refuses, in the same words (or say it cannot tell, when the header runs past the
//! bytes it is given). libFuzzer's own limits (`-malloc_limit_mb`, `-rss_limit_mb`) catch an
//! allocation the file's size does not justify.
#![no_main]

use std::io::Cursor;

use tokenscope::model::{HeaderCheck, Model};
use tokenscope::{Error, ModelError};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let full = Model::read(&mut Cursor::new(data), &mut |_, _| {});
    if let Err(Error::Model(ModelError::ReadersDisagree(difference))) = &full {
        panic!("our header walk and candle's parse read the header differently: {difference}");
    }
    let early = Model::check_header(data, data.len() as u64);
    match (&early, &full) {
        (Err(e), Ok(_)) => panic!("the header check refused a file that loads: {e}"),
        (Err(e), Err(f)) => assert_eq!(e.to_string(), f.to_string(), "the header check and the load refuse in other words"),
        (Ok(HeaderCheck::Inconclusive), _) => panic!("the header check could not tell, though it had the whole file"),
        (Ok(HeaderCheck::Sound), _) => {}
    }
});
