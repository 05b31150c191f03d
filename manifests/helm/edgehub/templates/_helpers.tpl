{{/* Names are the release's: a release "edgehub" in namespace edgehub-system gives the same
objects as `kubectl apply -k manifests/` (tests compare them). */}}
{{- define "edgehub.name" -}}{{ .Release.Name }}{{- end -}}

{{- define "edgehub.labels" -}}
app.kubernetes.io/name: edgehub
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "edgehub.selector" -}}
app.kubernetes.io/name: edgehub
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The image of a part: its own Akri-style image values when set, else image. */}}
{{- define "edgehub.image" -}}
{{- $own := .own | default dict -}}
{{- $repo := $own.repository | default .root.Values.image.repository -}}
{{- $tag := $own.tag | default .root.Values.image.tag | default .root.Chart.AppVersion -}}
{{ $repo }}:{{ $tag }}
{{- end -}}

{{- define "edgehub.pullPolicy" -}}
{{- $own := .own | default dict -}}
{{ $own.pullPolicy | default .root.Values.image.pullPolicy }}
{{- end -}}

{{- define "edgehub.pullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{ toYaml . | indent 2 }}
{{- end }}
{{- end -}}

{{- define "edgehub.scrape" -}}
{{- if .root.Values.prometheus.enabled }}
annotations:
  prometheus.io/scrape: "true"
  prometheus.io/port: {{ .port | quote }}
  prometheus.io/path: /metrics
{{- end }}
{{- end -}}

{{- define "edgehub.restricted" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop:
    - ALL
{{- end -}}

{{/* DEBUG_ECHO_INSTANCES_SHARED: Akri's debugEcho.configuration.shared when given (false too),
else debugEcho.discovery.shared. */}}
{{- define "edgehub.debugEchoShared" -}}
{{- $akri := .Values.debugEcho.configuration -}}
{{- if and (hasKey $akri "shared") (not (kindIs "invalid" $akri.shared)) -}}
{{ $akri.shared }}
{{- else -}}
{{ .Values.debugEcho.discovery.shared }}
{{- end -}}
{{- end -}}

{{/* The udev handler's /run/udev: Akri's udev.discovery.host.udev when given, else
agent.host.udev. */}}
{{- define "edgehub.udevHostPath" -}}
{{- $host := .Values.udev.discovery.host | default dict -}}
{{ $host.udev | default .Values.agent.host.udev }}
{{- end -}}

{{/* --yurtstaticset-owner: in YurtStaticSet mode hub.yurtStaticSet.owner (an explicit
controller.yurtStaticSetOwner must agree), else controller.yurtStaticSetOwner or yurt-manager. */}}
{{- define "edgehub.yurtStaticSetOwner" -}}
{{- $c := .Values.controller.yurtStaticSetOwner -}}
{{- $y := .Values.hub.yurtStaticSet -}}
{{- if and .Values.hub.enabled $y.enabled -}}
{{- if and $c (ne $c $y.owner) -}}
{{- fail (printf "controller.yurtStaticSetOwner=%s but hub.yurtStaticSet.owner=%s: the hub's YurtStaticSets would be rolled out by nobody (or twice); leave controller.yurtStaticSetOwner empty, or set hub.yurtStaticSet.owner=yurt-manager if OpenYurt's yurt-manager runs" $c $y.owner) -}}
{{- end -}}
{{ $y.owner }}
{{- else -}}
{{ $c | default "yurt-manager" }}
{{- end -}}
{{- end -}}
