// The code the docs show is code the suite compiles: every block of README.md and docs/*.md marked
// `<!-- from FILE [TAG] -->` must equal the lines of FILE between its two `// [TAG]` lines (the
// program that the suite builds and runs), up to common indentation.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

// Whether the line, less its indentation, opens or closes a code block.
bool fence(const std::string& line) {
  const auto first = line.find_first_not_of(' ');
  return first != std::string::npos && line.compare(first, 3, "```") == 0;
}

std::vector<std::string> lines_of(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The lines without their common leading spaces, and without trailing spaces.
std::vector<std::string> dedented(std::vector<std::string> lines) {
  std::size_t indent = std::string::npos;
  for (const auto& l : lines)
    if (l.find_first_not_of(' ') != std::string::npos)
      indent = std::min(indent, l.find_first_not_of(' '));
  for (auto& l : lines) {
    l = l.size() > indent ? l.substr(indent == std::string::npos ? 0 : indent) : std::string();
    l.erase(l.find_last_not_of(' ') + 1);
  }
  return lines;
}

// The lines strictly between the two lines `// [tag]` of `source`, or nothing if there are not
// exactly two.
std::vector<std::string> tagged(const std::vector<std::string>& source, const std::string& tag) {
  std::vector<std::size_t> at;
  for (std::size_t i = 0; i < source.size(); ++i) {
    const auto first = source[i].find_first_not_of(' ');
    if (first != std::string::npos && source[i].substr(first) == "// [" + tag + "]")
      at.push_back(i);
  }
  if (at.size() != 2) return {};
  return {source.begin() + static_cast<long>(at[0]) + 1, source.begin() + static_cast<long>(at[1])};
}

TEST(DocSnippets, EveryMarkedBlockIsTheCompiledCode) {
  const fs::path root(DISTOP_SOURCE_DIR);
  std::vector<fs::path> docs{root / "README.md"};
  for (const auto& e : fs::directory_iterator(root / "docs"))
    if (e.path().extension() == ".md") docs.push_back(e.path());
  int checked = 0;
  for (const auto& doc : docs) {
    const auto lines = lines_of(doc);
    for (std::size_t i = 0; i < lines.size(); ++i) {
      // <!-- from FILE [TAG] -->  (std::regex is avoided: GCC 12 warns inside it under the
      // sanitizers' optimisation level)
      const std::string& line = lines[i];
      const auto from = line.find("<!-- from ");
      if (from == std::string::npos) continue;
      const auto open = line.find(" [", from + 10), close = line.find("] -->", from);
      if (open == std::string::npos || close == std::string::npos || close < open) continue;
      const std::string file = line.substr(from + 10, open - from - 10);
      const std::string tag = line.substr(open + 2, close - open - 2);
      SCOPED_TRACE(doc.filename().string() + ":" + std::to_string(i + 1) + " from " + file + " [" +
                   tag + "]");
      ASSERT_TRUE(i + 1 < lines.size() && fence(lines[i + 1]))
          << "the marker must be followed by a code block";
      std::vector<std::string> block;
      std::size_t j = i + 2;
      for (; j < lines.size() && !fence(lines[j]); ++j) block.push_back(lines[j]);
      ASSERT_LT(j, lines.size()) << "unterminated code block";
      const auto want = tagged(lines_of(root / file), tag);
      ASSERT_FALSE(want.empty()) << file << " has no pair of // [" << tag << "] lines";
      const auto a = dedented(block), b = dedented(want);
      std::string expected;
      for (const auto& l : b) expected += l + "\n";
      EXPECT_EQ(a, b) << "the block should read:\n" << expected;
      ++checked;
    }
  }
  EXPECT_GE(checked, 5) << "the docs lost their compiled snippets";
}

}  // namespace
