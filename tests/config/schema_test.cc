// The schema machinery on a small struct that uses every value type: what a file may contain,
// which errors it gets (with file:line:column, 1-based), how --set overrides apply, and that a
// dump reads back to the same struct.
#include "config/schema.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>

namespace ms::config {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

enum class Color { kRed, kGreen };
constexpr std::array<EnumName<Color>, 2> kColorNames{{{"red", Color::kRed},
                                                      {"green", Color::kGreen}}};
std::span<const EnumName<Color>> enum_names(Color) { return kColorNames; }

struct Inner {
  double rate = 0.5;
  std::vector<int64_t> sizes = {1, 2};
  bool operator==(const Inner&) const = default;
};

struct Toy {
  bool verbose = false;
  int64_t count = 3;
  std::string mode = "fast";
  Color color = Color::kRed;
  std::vector<double> weights = {0.25, 0.75};
  std::vector<std::string> tags;
  std::string label = "x";
  Inner inner;
  bool operator==(const Toy&) const = default;
};

Schema<Toy> make_schema() {
  Schema<Toy> s;
  s.add("verbose", "Print more.", &Toy::verbose);
  s.add("count", "How many.", &Toy::count).at_least(1).at_most(10);
  s.add("mode", "Speed.", &Toy::mode).one_of({"fast", "slow"});
  s.add("color", "Paint.", &Toy::color);
  s.add("weights", "Two weights.", &Toy::weights).length(2).at_least(0.0).at_most(1.0);
  s.add("tags", "Free labels.", &Toy::tags);
  s.add("label", "A name | with a bar.", &Toy::label);
  s.add("inner.rate", "A rate.", &Toy::inner, &Inner::rate).above(0.0).below(1.0);
  s.add("inner.sizes", "Sizes.", &Toy::inner, &Inner::sizes).non_empty().at_least(1);
  s.add_rule("`inner.sizes` has at most `count` items",
             [](const Toy& t) -> std::optional<std::string> {
               if (static_cast<int64_t>(t.inner.sizes.size()) <= t.count) return std::nullopt;
               return "inner.sizes has " + std::to_string(t.inner.sizes.size()) +
                      " items, more than count (" + std::to_string(t.count) + ")";
             });
  return s;
}

const Schema<Toy>& schema() {
  static const Schema<Toy> s = make_schema();
  return s;
}

// The error message of parsing `text` as "t.yaml"; fails the test if parsing succeeds.
std::string error_of(const std::string& text, const std::vector<std::string>& sets = {}) {
  Result<Toy> r = schema().parse_text(text, "t.yaml", sets);
  EXPECT_FALSE(r.ok()) << "parsed unexpectedly: " << text;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  return r.status().message();
}

Toy parse_ok(const std::string& text, const std::vector<std::string>& sets = {}) {
  Result<Toy> r = schema().parse_text(text, "t.yaml", sets);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : Toy{};
}

TEST(Schema, EmptyDocumentGivesTheStructDefaults) {
  EXPECT_EQ(parse_ok(""), Toy{});
  EXPECT_EQ(parse_ok("# only a comment\n"), Toy{});
  EXPECT_EQ(parse_ok("inner:\n"), Toy{});
}

TEST(Schema, ReadsEveryValueType) {
  const Toy t = parse_ok(
      "verbose: true\n"
      "count: 7\n"
      "mode: slow\n"
      "color: green\n"
      "weights: [0, 1.0]\n"
      "tags:\n  - a\n  - 'b c'\n"
      "label: 42\n"
      "inner: {rate: 1.0e-3, sizes: [4, 5, 6]}\n");
  EXPECT_TRUE(t.verbose);
  EXPECT_EQ(t.count, 7);
  EXPECT_EQ(t.mode, "slow");
  EXPECT_EQ(t.color, Color::kGreen);
  EXPECT_EQ(t.weights, (std::vector<double>{0.0, 1.0}));
  EXPECT_EQ(t.tags, (std::vector<std::string>{"a", "b c"}));
  EXPECT_EQ(t.label, "42");
  EXPECT_EQ(t.inner.rate, 1.0e-3);
  EXPECT_EQ(t.inner.sizes, (std::vector<int64_t>{4, 5, 6}));
}

TEST(Schema, KeysLeftOutKeepTheirDefaults) {
  const Toy t = parse_ok("inner:\n  rate: 0.25\n");
  Toy expected;
  expected.inner.rate = 0.25;
  EXPECT_EQ(t, expected);
}

TEST(Schema, BoolsAcceptTheUsualSpellings) {
  EXPECT_TRUE(parse_ok("verbose: yes").verbose);
  EXPECT_TRUE(parse_ok("verbose: True").verbose);
  EXPECT_FALSE(parse_ok("verbose: off").verbose);
  EXPECT_EQ(error_of("verbose: maybe"),
            "t.yaml:1:10: 'verbose' expects a bool (true or false), got 'maybe'");
}

TEST(Schema, NullStringIsEmpty) { EXPECT_EQ(parse_ok("label:\n").label, ""); }

TEST(Schema, UnknownKeyNamesLineColumnAndSuggestion) {
  EXPECT_EQ(error_of("count: 2\ninner:\n    rat: 0.1\n"),
            "t.yaml:3:5: unknown key 'inner.rat'; did you mean 'inner.rate'?");
}

TEST(Schema, UnknownSectionGetsSuggestion) {
  EXPECT_EQ(error_of("iner:\n  rate: 0.1\n"),
            "t.yaml:1:1: unknown key 'iner'; did you mean 'inner'?");
}

TEST(Schema, KeyInTheWrongSectionSuggestsWhereItLives) {
  EXPECT_EQ(error_of("rate: 0.1\n"), "t.yaml:1:1: unknown key 'rate'; did you mean 'inner.rate'?");
}

TEST(Schema, UnrelatedUnknownKeyGetsNoSuggestion) {
  const std::string e = error_of("zzzzzzzz: 1\n");
  EXPECT_EQ(e, "t.yaml:1:1: unknown key 'zzzzzzzz'");
  EXPECT_THAT(e, Not(HasSubstr("did you mean")));
}

TEST(Schema, DuplicateKeyIsAnError) {
  EXPECT_EQ(error_of("count: 2\ncount: 3\n"),
            "t.yaml:2:1: duplicate key 'count' (first given on line 1)");
}

TEST(Schema, WrongTypesNameTheExpectedTypeAndTheValue) {
  EXPECT_EQ(error_of("count: ten"), "t.yaml:1:8: 'count' expects an integer, got 'ten'");
  EXPECT_EQ(error_of("count: 1.5"), "t.yaml:1:8: 'count' expects an integer, got '1.5'");
  EXPECT_EQ(error_of("count: 0x10"), "t.yaml:1:8: 'count' expects an integer, got '0x10'");
  EXPECT_EQ(error_of("inner: {rate: fast}"),
            "t.yaml:1:15: 'inner.rate' expects a number, got 'fast'");
  EXPECT_EQ(error_of("inner: {rate: .nan}"),
            "t.yaml:1:15: 'inner.rate' expects a number, got '.nan'");
  EXPECT_EQ(error_of("color: blue"),
            "t.yaml:1:8: 'color' expects one of red, green, got 'blue'");
  EXPECT_EQ(error_of("label: {a: 1}"), "t.yaml:1:8: 'label' expects a string, got a mapping");
  EXPECT_EQ(error_of("count:"), "t.yaml:1:1: 'count' expects an integer, got nothing");
}

TEST(Schema, ListErrorsNameTheBadItem) {
  EXPECT_EQ(error_of("weights: 0.5"),
            "t.yaml:1:10: 'weights' expects a list of numbers, got '0.5'");
  EXPECT_EQ(error_of("weights: [0.5, x]"),
            "t.yaml:1:10: 'weights' expects a list of numbers, got 'x' as item 2");
  EXPECT_EQ(error_of("inner:\n  sizes: [1, [2]]\n"),
            "t.yaml:2:10: 'inner.sizes' expects a list of integers, got a list as item 2");
}

TEST(Schema, SectionGivenAValueIsAnError) {
  EXPECT_EQ(error_of("inner: 3"),
            "t.yaml:1:8: 'inner' is a section and expects a mapping of keys, got '3'");
}

TEST(Schema, OutOfRangeValuesStateTheRange) {
  EXPECT_EQ(error_of("count: 0"), "t.yaml:1:8: 'count' must be in [1, 10], got 0");
  EXPECT_EQ(error_of("inner: {rate: 1}"), "t.yaml:1:15: 'inner.rate' must be in (0, 1), got 1");
  EXPECT_EQ(error_of("weights: [0.5, 2]"),
            "t.yaml:1:10: 'weights' items must be in [0, 1], got 2");
  EXPECT_EQ(error_of("weights: [0.5]"),
            "t.yaml:1:10: 'weights' expects exactly 2 items, got 1: [0.5]");
  EXPECT_EQ(error_of("inner: {sizes: []}"), "t.yaml:1:16: 'inner.sizes' must not be empty");
  EXPECT_EQ(error_of("mode: medium"),
            "t.yaml:1:7: 'mode' must be one of: fast, slow; got 'medium'");
}

TEST(Schema, FailedValueLeavesTheDefault) {
  // Every error is reported, and none of them half-applies a value.
  const std::string e = error_of("count: 0\nweights: [0.5, 2]\n");
  EXPECT_EQ(e,
            "t.yaml:1:8: 'count' must be in [1, 10], got 0\n"
            "t.yaml:2:10: 'weights' items must be in [0, 1], got 2");
}

TEST(Schema, SyntaxErrorsGiveTheirLocation) {
  EXPECT_THAT(error_of("count: 2\nweights: [1,\n"), HasSubstr("t.yaml:3:1: invalid YAML: "));
  EXPECT_THAT(error_of("a: b\n  c: d\n"), HasSubstr("t.yaml:2:4: invalid YAML: "));
}

TEST(Schema, TopLevelMustBeAMapping) {
  EXPECT_EQ(error_of("- 1\n- 2\n"), "t.yaml:1:1: expects a mapping of config sections, got a list");
}

TEST(Schema, RulesBetweenKeysRunAfterEveryValue) {
  EXPECT_EQ(error_of("count: 1\n"), "t.yaml: inner.sizes has 2 items, more than count (1)");
  // The override fixes what the file broke: rules see the final values.
  EXPECT_EQ(parse_ok("count: 1\n", {"count=2"}).count, 2);
}

TEST(Schema, RulesDoNotRunWhenValuesAreAlreadyWrong) {
  EXPECT_EQ(error_of("count: 1\ninner: {rate: 2}\n"),
            "t.yaml:2:15: 'inner.rate' must be in (0, 1), got 2");
}

TEST(SchemaSet, OverridesApplyAfterTheFileInOrder) {
  const Toy t = parse_ok("count: 4\nmode: slow\n", {"count=5", "verbose=true", "count=6"});
  EXPECT_EQ(t.count, 6);
  EXPECT_TRUE(t.verbose);
  EXPECT_EQ(t.mode, "slow");
}

TEST(SchemaSet, ValuesAreYamlScalarsListsOrSections) {
  const Toy t = parse_ok("", {"weights=[0.1, 0.9]", "tags=[x, y]", "inner={rate: 0.2}",
                              "inner.sizes=[3]", "label=a=b", "color=green"});
  EXPECT_EQ(t.weights, (std::vector<double>{0.1, 0.9}));
  EXPECT_EQ(t.tags, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(t.inner.rate, 0.2);
  EXPECT_EQ(t.inner.sizes, (std::vector<int64_t>{3}));
  EXPECT_EQ(t.label, "a=b");
  EXPECT_EQ(t.color, Color::kGreen);
  EXPECT_EQ(parse_ok("label: y", {"label="}).label, "");
}

TEST(SchemaSet, BadValuesGetTheSameChecksAsTheFile) {
  EXPECT_EQ(error_of("", {"count=abc"}), "--set count=abc: 'count' expects an integer, got 'abc'");
  EXPECT_EQ(error_of("", {"count=11"}), "--set count=11: 'count' must be in [1, 10], got 11");
  EXPECT_EQ(error_of("", {"inner={rat: 1}"}),
            "--set inner={rat: 1}: unknown key 'inner.rat'; did you mean 'inner.rate'?");
}

TEST(SchemaSet, UnknownKeysGetASuggestion) {
  EXPECT_EQ(error_of("", {"inner.rat=0.1"}),
            "--set inner.rat=0.1: unknown key 'inner.rat'; did you mean 'inner.rate'?");
  EXPECT_EQ(error_of("", {"iner.rate=0.1"}),
            "--set iner.rate=0.1: unknown key 'iner.rate'; did you mean 'inner.rate'?");
  EXPECT_EQ(error_of("", {"cuont=1"}), "--set cuont=1: unknown key 'cuont'; did you mean 'count'?");
}

TEST(SchemaSet, MalformedAssignmentsAreRefused) {
  EXPECT_EQ(error_of("", {"count"}), "--set count: expected key=value, e.g. --set optim.lr=1e-4");
  EXPECT_EQ(error_of("", {"=3"}), "--set =3: expected key=value, e.g. --set optim.lr=1e-4");
  EXPECT_THAT(error_of("", {"weights=[1,"}), HasSubstr("--set weights=[1,: invalid YAML: "));
}

TEST(SchemaSet, EveryProblemIsReportedOnce) {
  const std::string e = error_of("count: ten\n", {"cuont=1", "verbose=2"});
  EXPECT_EQ(e,
            "t.yaml:1:8: 'count' expects an integer, got 'ten'\n"
            "--set cuont=1: unknown key 'cuont'; did you mean 'count'?\n"
            "--set verbose=2: 'verbose' expects a bool (true or false), got '2'");
}

Toy unusual_toy() {
  Toy t;
  t.verbose = true;
  t.count = 9;
  t.mode = "slow";
  t.color = Color::kGreen;
  t.weights = {0.1, 1.0 / 3.0};
  t.tags = {"", "true", "123", "a: b", "null", "~", "#x", "-1e5"};
  t.label = "1.5";
  t.inner.rate = 1e-8;
  t.inner.sizes = {1, 9007199254740993};
  return t;
}

TEST(SchemaDump, ReloadsToTheSameStruct) {
  const Toy t = unusual_toy();
  const std::string yaml = schema().dump(t);
  EXPECT_EQ(parse_ok(yaml), t) << yaml;
  EXPECT_EQ(parse_ok(schema().dump(Toy{})), Toy{});
}

TEST(SchemaDump, NestsKeysBySectionInDeclarationOrder) {
  EXPECT_EQ(schema().dump(Toy{}),
            "verbose: false\n"
            "count: 3\n"
            "mode: fast\n"
            "color: red\n"
            "weights: [0.25, 0.75]\n"
            "tags: []\n"
            "label: x\n"
            "inner:\n"
            "  rate: 0.5\n"
            "  sizes: [1, 2]\n");
}

TEST(SchemaDump, DescriptionsBecomeCommentsAndStillReload) {
  const std::string yaml = schema().dump(unusual_toy(), /*describe=*/true);
  EXPECT_THAT(yaml, HasSubstr("count: 9  # How many.\n"));
  EXPECT_EQ(parse_ok(yaml), unusual_toy());
}

// The help line of `key`, with runs of spaces squeezed to one so tests ignore alignment.
std::string help_line(const std::string& key) {
  const std::string help = schema().help();
  const std::size_t start = help.find("\n" + key + " ");
  if (start == std::string::npos) return "";
  std::string line = help.substr(start + 1, help.find('\n', start + 1) - start - 1);
  std::string squeezed;
  for (char c : line) {
    if (!(c == ' ' && !squeezed.empty() && squeezed.back() == ' ')) squeezed += c;
  }
  return squeezed;
}

TEST(SchemaDocs, HelpListsKeyTypeDefaultDescriptionAndConstraints) {
  EXPECT_EQ(schema().help().substr(0, 4), "KEY ");
  EXPECT_EQ(help_line("count"), "count integer 3 How many. [in [1, 10]]");
  EXPECT_EQ(help_line("color"), "color enum red Paint. [one of: red, green]");
  EXPECT_EQ(help_line("inner.sizes"), "inner.sizes list of integers [1, 2] Sizes. [not empty; each >= 1]");
  EXPECT_EQ(help_line("tags"), "tags list of strings [] Free labels.");
}

TEST(SchemaDocs, MarkdownHasOneRowPerKeyAndTheRules) {
  const std::string md = schema().markdown();
  EXPECT_THAT(md, HasSubstr("| Key | Type | Default | Allowed | Description |\n"));
  EXPECT_THAT(md, HasSubstr("| `weights` | list of numbers | `[0.25, 0.75]` | 2 items; each in "
                            "[0, 1] | Two weights. |\n"));
  EXPECT_THAT(md, HasSubstr("| `label` | string | `x` |  | A name \\| with a bar. |\n"));
  EXPECT_THAT(md, HasSubstr("- `inner.sizes` has at most `count` items\n"));
}

TEST(SchemaFile, MissingFileIsNotFound) {
  Result<Toy> r = schema().parse_file("/nonexistent/dir/run.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("'/nonexistent/dir/run.yaml'"));
}

TEST(SchemaFile, ErrorsNameTheFilePath) {
  const std::string path = ::testing::TempDir() + "schema_test_run.yaml";
  std::ofstream(path) << "count: 2\ninner:\n  rat: 0.3\n";
  Result<Toy> r = schema().parse_file(path, {"verbose=true"});
  std::remove(path.c_str());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            path + ":3:3: unknown key 'inner.rat'; did you mean 'inner.rate'?");
}

}  // namespace
}  // namespace ms::config
