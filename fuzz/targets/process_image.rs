#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| kioku_fuzz::process_image(data));
