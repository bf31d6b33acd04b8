// The parts of File and Env shared by every implementation: the sequential cursor, appends,
// the one-at-a-time read_ranges, and directory helpers built from the primitive operations.
#include "io/env.h"

#include <sys/stat.h>

namespace ms::io {

Result<size_t> File::read(std::span<std::byte> dest) {
  MS_ASSIGN_OR_RETURN(size_t n, read_at(read_offset_, dest));
  read_offset_ += n;
  return n;
}

Status File::append(std::span<const std::byte> data) {
  MS_RETURN_IF_ERROR(write_at(append_offset_, data));
  append_offset_ += data.size();
  return Status::OK();
}

FileKind file_kind_of_mode(uint32_t st_mode) {
  if (S_ISREG(st_mode)) return FileKind::kRegular;
  if (S_ISDIR(st_mode)) return FileKind::kDirectory;
  if (S_ISFIFO(st_mode)) return FileKind::kFifo;
  if (S_ISCHR(st_mode)) return FileKind::kCharDevice;
  if (S_ISBLK(st_mode)) return FileKind::kBlockDevice;
  if (S_ISSOCK(st_mode)) return FileKind::kSocket;
  return FileKind::kOther;
}

std::string_view file_kind_name(FileKind kind) {
  switch (kind) {
    case FileKind::kRegular:
      return "a regular file";
    case FileKind::kDirectory:
      return "a directory";
    case FileKind::kFifo:
      return "a FIFO";
    case FileKind::kCharDevice:
      return "a character device";
    case FileKind::kBlockDevice:
      return "a block device";
    case FileKind::kSocket:
      return "a socket";
    case FileKind::kOther:
      break;
  }
  return "an unknown kind of file";
}

Status check_range_filled(const File& file, const ReadRange& range, size_t got) {
  if (got == range.dest.size()) return Status::OK();
  return Corruption("'" + file.path() + "' ends at byte " + std::to_string(range.offset + got) +
                    " but a read of " + std::to_string(range.dest.size()) + " bytes at offset " +
                    std::to_string(range.offset) + " was expected to fit; the file is truncated");
}

Status Env::read_ranges(File& file, std::span<const ReadRange> ranges) {
  for (const ReadRange& range : ranges) {
    MS_ASSIGN_OR_RETURN(size_t got, file.read_at(range.offset, range.dest));
    MS_RETURN_IF_ERROR(check_range_filled(file, range, got));
  }
  return Status::OK();
}

Status Env::create_dirs(const std::string& path) {
  if (path.empty() || is_directory(path)) return Status::OK();
  std::string parent = parent_dir(path);
  if (parent != path && parent != ".") MS_RETURN_IF_ERROR(create_dirs(parent));
  return create_dir(path);
}

Status Env::remove_all(const std::string& path) {
  if (!exists(path)) return Status::OK();
  // The link check comes first: is_directory follows links, and a link to a directory must be
  // unlinked, not emptied.
  if (is_symlink(path) || !is_directory(path)) return remove_file(path);
  MS_ASSIGN_OR_RETURN(std::vector<std::string> names, list_dir(path));
  for (const std::string& name : names) MS_RETURN_IF_ERROR(remove_all(path + "/" + name));
  return remove_dir(path);
}

std::string parent_dir(const std::string& path) {
  size_t end = path.size();
  while (end > 1 && path[end - 1] == '/') --end;
  size_t slash = path.rfind('/', end - 1);
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace ms::io
