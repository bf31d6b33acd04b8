// Heatmap SVG and its HTML wrapper; see svg.h.
#include "diag/svg.h"

#include <algorithm>
#include <cstdio>

namespace ms::diag {
namespace {

constexpr int kCell = 22, kLeft = 90, kTop = 50, kLegendHeight = 40;

std::string format(const char* fmt, double a) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, a);
  return buf;
}

// White at `low`, deep red at `high`.
std::string colour(double value, double low, double high) {
  const double f = std::clamp((value - low) / (high - low), 0.0, 1.0);
  const int g = static_cast<int>(255 - 215 * f), b = static_cast<int>(255 - 225 * f);
  char buf[16];
  std::snprintf(buf, sizeof(buf), "#%02x%02x%02x", 255 - static_cast<int>(40 * f), g, b);
  return buf;
}

double highest(const Heatmap& h) {
  double high = h.low + 0.05;
  for (const auto& row : h.values) {
    for (double v : row) high = std::max(high, v);
  }
  return high;
}

std::string cells(const Heatmap& h, double high) {
  std::string out;
  for (size_t r = 0; r < h.values.size(); ++r) {
    const int y = kTop + static_cast<int>(r) * kCell;
    out += "<text x=\"" + std::to_string(kLeft - 6) + "\" y=\"" + std::to_string(y + 15) +
           "\" text-anchor=\"end\">" + xml_escape(h.row_labels[r]) + "</text>\n";
    for (size_t c = 0; c < h.values[r].size(); ++c) {
      const double v = h.values[r][c];
      out += "<rect x=\"" + std::to_string(kLeft + static_cast<int>(c) * kCell) + "\" y=\"" +
             std::to_string(y) + "\" width=\"" + std::to_string(kCell - 1) + "\" height=\"" +
             std::to_string(kCell - 1) + "\" fill=\"" + colour(v, h.low, high) + "\"><title>" +
             xml_escape(h.row_labels[r] + ", " + h.column_labels[c] + ": " + h.value_label +
                        " " + format("%.3f", v)) +
             "</title></rect>\n";
    }
  }
  return out;
}

std::string column_labels(const Heatmap& h) {
  std::string out;
  const size_t every = std::max<size_t>(1, h.column_labels.size() / 25);
  for (size_t c = 0; c < h.column_labels.size(); c += every) {
    out += "<text x=\"" + std::to_string(kLeft + static_cast<int>(c) * kCell + kCell / 2) +
           "\" y=\"" + std::to_string(kTop - 6) + "\" text-anchor=\"middle\">" +
           xml_escape(h.column_labels[c]) + "</text>\n";
  }
  return out;
}

std::string legend(const Heatmap& h, double high, int y) {
  std::string out;
  constexpr int kSteps = 10;
  for (int i = 0; i <= kSteps; ++i) {
    const double v = h.low + (high - h.low) * i / kSteps;
    out += "<rect x=\"" + std::to_string(kLeft + i * 16) + "\" y=\"" + std::to_string(y) +
           "\" width=\"16\" height=\"12\" fill=\"" + colour(v, h.low, high) + "\"/>\n";
  }
  out += "<text x=\"" + std::to_string(kLeft) + "\" y=\"" + std::to_string(y + 26) + "\">" +
         xml_escape(h.value_label) + " " + format("%.2f", h.low) + " .. " +
         format("%.2f", high) + "</text>\n";
  return out;
}

}  // namespace

std::string xml_escape(const std::string& text) {
  std::string out;
  for (char ch : text) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += ch;
    }
  }
  return out;
}

std::string heatmap_svg(const Heatmap& h) {
  const double high = highest(h);
  const size_t columns = h.column_labels.size();
  const int width = kLeft + static_cast<int>(std::max<size_t>(columns, 12)) * kCell + 20;
  const int grid_bottom = kTop + static_cast<int>(h.values.size()) * kCell;
  const int height = grid_bottom + kLegendHeight + 20;
  std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width) +
                    "\" height=\"" + std::to_string(height) +
                    "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  out += "<text x=\"" + std::to_string(kLeft) + "\" y=\"18\" font-size=\"14\">" +
         xml_escape(h.title) + "</text>\n";
  out += column_labels(h);
  out += cells(h, high);
  out += legend(h, high, grid_bottom + 12);
  out += "</svg>\n";
  return out;
}

std::string html_page(const std::string& title, const std::string& summary_text,
                      const std::string& svg) {
  return "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" + xml_escape(title) +
         "</title></head>\n<body>\n<h1>" + xml_escape(title) + "</h1>\n<pre>" +
         xml_escape(summary_text) + "</pre>\n" + svg + "</body></html>\n";
}

}  // namespace ms::diag
