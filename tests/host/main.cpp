// SPDX-License-Identifier: Apache-2.0
// doctest main of the host tier (kvc_host_tests, kvc_host_tests_cxx20).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
