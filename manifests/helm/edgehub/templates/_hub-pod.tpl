{{/* The hub's static Pod (metadata and spec): the static-Pod ConfigMap (hub-static-pod.yaml)
and each pool's YurtStaticSet template (hub-yurtstaticset.yaml) render this one, so they never
drift. Takes root, name (the Pod's, hence its mirror Pod <name>-<node>), and optionally pool (a
label) and nodeSelector. */}}
{{- define "edgehub.hubPod" -}}
{{- $p := .root.Values.hub.staticPod -}}
metadata:
  name: {{ .name }}
  namespace: {{ .root.Values.hub.namespace }}
  labels:
    app.kubernetes.io/name: edgehub
    app.kubernetes.io/component: hub
    {{- with .pool }}
    apps.openyurt.io/nodepool: {{ . }}
    {{- end }}
  {{- with include "edgehub.scrape" (dict "root" .root "port" $p.metricsPort) | trim }}
  {{- . | nindent 2 }}
  {{- end }}
spec:
  {{- with .nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  hostNetwork: true
  dnsPolicy: Default
  priorityClassName: system-node-critical
  terminationGracePeriodSeconds: 30
  containers:
    - name: hub
      image: {{ include "edgehub.image" (dict "root" .root "own" dict) }}
      imagePullPolicy: {{ include "edgehub.pullPolicy" (dict "root" .root "own" dict) }}
      command:
        - edgehub
        - hub
        - --server-addr={{ $p.serverAddr }}
        - --node-name=$(NODE_NAME)
        - --namespace={{ .root.Values.hub.namespace }}
        - --root-dir={{ $p.rootDir }}
        - --join-token-file={{ $p.rootDir }}/join-token
        - --discovery-token-ca-cert-hash=$(CA_CERT_HASH)
        - --disk-cache-path={{ $p.diskCachePath }}
        - --bind-address=127.0.0.1
        - --serve-port=10267
        - --bind-proxy-address=127.0.0.1
        - --proxy-port=10261
        - --proxy-secure-port=10268
        - --enable-dummy-if={{ $p.enableDummyIf }}
        - --lb-mode={{ $p.lbMode }}
        - --shutdown-grace-seconds=10
        {{- if .root.Values.prometheus.enabled }}
        - --metrics-bind-address=0.0.0.0
        - --metrics-port={{ $p.metricsPort }}
        {{- end }}
        {{- range $p.extraArgs }}
        - {{ . }}
        {{- end }}
      env:
        - name: NODE_NAME
          valueFrom:
            fieldRef:
              fieldPath: spec.nodeName
        - name: CA_CERT_HASH
          value: {{ $p.caCertHash | quote }}
      ports:
        - {name: proxy, containerPort: 10261, protocol: TCP}
        - {name: hub-server, containerPort: 10267, protocol: TCP}
        - {name: proxy-secure, containerPort: 10268, protocol: TCP}
        {{- if .root.Values.prometheus.enabled }}
        - {name: metrics, containerPort: {{ $p.metricsPort }}, protocol: TCP}
        {{- end }}
      livenessProbe:
        httpGet: {host: 127.0.0.1, path: /v1/healthz, port: 10267}
        initialDelaySeconds: 120
        periodSeconds: 10
        failureThreshold: 3
      readinessProbe:
        httpGet: {host: 127.0.0.1, path: /v1/readyz, port: 10267}
        initialDelaySeconds: 30
        periodSeconds: 15
      resources:
        {{- toYaml $p.resources | nindent 12 }}
      securityContext:
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        capabilities:
          drop: [ALL]
          {{- if $p.enableDummyIf }}
          add: [NET_ADMIN]
          {{- end }}
      volumeMounts:
        - {name: cache, mountPath: {{ $p.diskCachePath }}}
        - {name: root-dir, mountPath: {{ $p.rootDir }}}
        - {name: tmp, mountPath: /tmp}
  volumes:
    - name: cache
      hostPath: {path: {{ $p.diskCachePath }}, type: DirectoryOrCreate}
    - name: root-dir
      hostPath: {path: {{ $p.rootDir }}, type: DirectoryOrCreate}
    - name: tmp
      emptyDir: {medium: Memory, sizeLimit: 16Mi}
{{- end -}}
