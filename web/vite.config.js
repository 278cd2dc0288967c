// Builds the web view into static files the controller embeds (web/CMakeLists.txt). `npm run
// dev` serves it against a mock of the controller's API (dev/mock-api.js).
import { defineConfig } from 'vite';
import { mockApi } from './dev/mock-api.js';

export default defineConfig(({ command }) => ({
  base: './',
  plugins: command === 'serve' ? [mockApi()] : [],
  build: { outDir: 'dist', assetsDir: 'assets', sourcemap: false },
}));
