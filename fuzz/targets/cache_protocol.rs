#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| kioku_fuzz::cache_protocol(data));
