#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| distlock_fuzz::runtime::push_frame(data));
