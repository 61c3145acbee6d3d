// Topic-filtered diagnostic logging to stderr.
//
// EMBER_LOG is a comma-separated list of topics (spaces ignored; `all`
// enables every topic), e.g. EMBER_LOG=fusion. A line logged under topic T
// is printed as "T: <message>\n" when T is enabled. The variable is read on
// every call, so tests may set it with setenv; logging is for diagnostics,
// never on a hot path.
#pragma once

#include <string>
#include <string_view>

namespace ember {

// Whether `topic` is listed in EMBER_LOG (or EMBER_LOG lists `all`).
bool LogEnabled(std::string_view topic);

// Prints "<topic>: <message>" and a newline to stderr if the topic is enabled.
void LogLine(std::string_view topic, std::string_view message);

}  // namespace ember
