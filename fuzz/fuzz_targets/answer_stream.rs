#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| distlock_fuzz::runtime::answer_stream(data));
