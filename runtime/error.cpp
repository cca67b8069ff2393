// The error hierarchy is header-only; this file anchors the library until the
// store and the rest of runtime/ land beside it.
#include "runtime/error.h"
