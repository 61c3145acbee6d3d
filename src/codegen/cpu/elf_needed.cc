// DT_NEEDED entries of an ELF64 object, with every offset bounds-checked.
#include "codegen/cpu/elf_needed.h"

#include <elf.h>

#include <cstring>

#include "codegen/cpu/disk_cache.h"

namespace ember::codegen {

StatusOr<std::vector<std::string>> ElfNeededLibraries(const std::string& path) {
  std::string b;
  EMBER_RETURN_IF_ERROR(ReadFile(path, &b));
  auto bad = [&](const char* what) {
    return InvalidArgument(path, ": not a valid ELF64 object (", what, ")");
  };
  if (b.size() < sizeof(Elf64_Ehdr) || std::memcmp(b.data(), ELFMAG, SELFMAG) != 0)
    return bad("magic");
  Elf64_Ehdr eh;
  std::memcpy(&eh, b.data(), sizeof(eh));
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB) return bad("class");
  auto in_bounds = [&](uint64_t off, uint64_t len) {
    return off <= b.size() && len <= b.size() - off;
  };
  if (eh.e_shentsize != sizeof(Elf64_Shdr) ||
      !in_bounds(eh.e_shoff, uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr))) {
    return bad("section headers");
  }
  auto section = [&](int i) {
    Elf64_Shdr sh;
    std::memcpy(&sh, b.data() + eh.e_shoff + uint64_t(i) * sizeof(Elf64_Shdr), sizeof(sh));
    return sh;
  };
  std::vector<std::string> needed;
  for (int i = 0; i < eh.e_shnum; ++i) {
    Elf64_Shdr sh = section(i);
    if (sh.sh_type != SHT_DYNAMIC) continue;
    if (!in_bounds(sh.sh_offset, sh.sh_size) || sh.sh_link >= eh.e_shnum) return bad("dynamic");
    Elf64_Shdr strtab = section(static_cast<int>(sh.sh_link));
    if (!in_bounds(strtab.sh_offset, strtab.sh_size)) return bad("dynstr");
    for (uint64_t off = 0; off + sizeof(Elf64_Dyn) <= sh.sh_size; off += sizeof(Elf64_Dyn)) {
      Elf64_Dyn dyn;
      std::memcpy(&dyn, b.data() + sh.sh_offset + off, sizeof(dyn));
      if (dyn.d_tag == DT_NULL) break;
      if (dyn.d_tag != DT_NEEDED) continue;
      if (dyn.d_un.d_val >= strtab.sh_size) return bad("needed name");
      const char* s = b.data() + strtab.sh_offset + dyn.d_un.d_val;
      needed.emplace_back(s, strnlen(s, strtab.sh_size - dyn.d_un.d_val));
    }
  }
  return needed;
}

}  // namespace ember::codegen
