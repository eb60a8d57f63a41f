#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| distlock_fuzz::macros::attribute_args(data));
