// Declaration-only stand-in: ProcessGroupGloo.hpp includes it but uses nothing from it.
#pragma once
