// Self-contained SVG and HTML output for diagnosis reports (the straggler heatmap): no
// JavaScript and no external assets, so a report opens in any browser or image viewer and can
// be attached to a ticket as one file.
#pragma once

#include <string>
#include <vector>

namespace ms::diag {

struct Heatmap {
  std::string title;
  std::vector<std::string> row_labels, column_labels;
  std::vector<std::vector<double>> values;  // [row][column]
  double low = 1.0;  // value drawn white; the largest value (or low + 0.05) is drawn deepest red
  std::string value_label = "slowdown";
};

// An SVG document: one cell per value with a <title> tooltip, row and column labels, and a
// colour legend. Text is XML-escaped.
std::string heatmap_svg(const Heatmap& heatmap);

// An HTML page with `title`, the given preformatted summary text and the SVG inlined.
std::string html_page(const std::string& title, const std::string& summary_text,
                      const std::string& svg);

// Escapes &, <, >, " and ' for XML text and attributes.
std::string xml_escape(const std::string& text);

}  // namespace ms::diag
