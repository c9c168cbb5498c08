//! An ELF file's symbols on arbitrary bytes, as the symbol engine loads a dso from an archive
//! member or a debuginfod download (`profile::fuzz::elf_symbols`: `.symtab`/`.dynsym`,
//! MiniDebugInfo's xz, `name@plt`, the fixed-up table and lookups in it, the DWARF `--inline`
//! reads). Inputs of odd length are read as an archive member (positioned reads from a file,
//! names read at lookup), even ones from memory (MiniDebugInfo's decompressed image, the vdso).
//! Never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use perfpipe_fuzz::scratch;

fuzz_target!(|data: &[u8]| {
    let file = (data.len() % 2 == 1).then(|| scratch("elf_symbols", data).0.clone());
    std::hint::black_box(perfpipe_profile::fuzz::elf_symbols(data, file));
});
