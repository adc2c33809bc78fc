// Keeps strata_tools a valid library while it has no other sources.
namespace strata::tools {
int tools_anchor = 0;
}  // namespace strata::tools
